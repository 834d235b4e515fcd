package compose

import (
	"go.yaml.in/yaml/v3"
)

// locator finds where a setting is written, so that a warning or an error
// points at a line. compose-go keeps no lines, so the files are read once
// more as YAML nodes; the loading itself is compose-go's.
type locator struct {
	files []string     // as the user named them
	roots []*yaml.Node // each file's top mapping, nil if it is not one
}

func newLocator(files []string, contents [][]byte) *locator {
	l := &locator{files: files, roots: make([]*yaml.Node, len(files))}
	for i, data := range contents {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil && len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
			l.roots[i] = doc.Content[0]
		}
	}
	return l
}

// find returns the file and line of the deepest part of path that a file
// writes (path is a list of keys; "[]" stands for any item of a list, where
// the search stops). When several files write it, the one that writes the
// most of it wins, the first on a tie; when none does, the first file's
// line 1.
func (l *locator) find(path ...string) (string, int) {
	bestFile, bestLine, bestDepth := l.files[0], 1, -1
	for i, root := range l.roots {
		if root == nil {
			continue
		}
		node, line, depth := root, 0, 0
		for _, key := range path {
			value, keyLine := lookupKey(node, key)
			if value == nil {
				break
			}
			node, line = value, keyLine
			depth++
		}
		if depth > bestDepth && line > 0 {
			bestFile, bestLine, bestDepth = l.files[i], line, depth
		}
	}
	return bestFile, bestLine
}

// lookupKey returns the value of key in a mapping node, and the key's line.
func lookupKey(n *yaml.Node, key string) (*yaml.Node, int) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, 0
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1], n.Content[i].Line
		}
	}
	return nil, 0
}
