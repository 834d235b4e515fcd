package spec

import "regexp"

// aliasRE is the rule for an egg's aliases: names other eggs reach it by on
// its networks, which Docker resolves as DNS names. It is wider than the rule
// for egg names because Compose service names, which the Compose loader keeps
// as aliases so that an application's configuration keeps working, may hold
// capitals, dots and underscores (my_db, Auth.Service).
var aliasRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$`)

// AliasRule says in words what aliasRE accepts.
const AliasRule = "must be 1 to 63 letters, digits, hyphens, underscores or dots, not starting with a hyphen or a dot"
