// Package archtest holds the layer check: a test that reads the package
// table of docs/ARCHITECTURE.md and fails on any import that points up or
// across its groups (commands → control plane and agent → shared; control
// plane and agent never import each other). It has no code of its own: the
// doc is the table, so the map and the check cannot drift apart.
package archtest
