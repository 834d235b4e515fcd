package compose

import (
	"go.yaml.in/yaml/v3"
)

// locator finds where a setting is written, so that a warning or an error
// points at a line. compose-go keeps no lines, so the files are read once
// more as YAML nodes, but only when a first problem is to be located: a
// project without any pays nothing. The loading itself is compose-go's.
type locator struct {
	files    []string // as the user named them
	contents [][]byte
	roots    []*yaml.Node // each file's top mapping, nil if it is not one; nil until parsed
	// keys indexes each mapping looked into: key -> position in Content,
	// so that locating a problem in a file of many services stays cheap.
	keys map[*yaml.Node]map[string]int
}

func newLocator(files []string, contents [][]byte) *locator {
	return &locator{files: files, contents: contents}
}

// parse reads the files as YAML nodes, once.
func (l *locator) parse() {
	if l.roots != nil {
		return
	}
	l.roots, l.keys = make([]*yaml.Node, len(l.files)), map[*yaml.Node]map[string]int{}
	for i, data := range l.contents {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil && len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
			l.roots[i] = doc.Content[0]
		}
	}
}

// find returns the file and line of the deepest part of path that a file
// writes (path is a list of keys; "[]" stands for any item of a list, where
// the search stops). When several files write it, the one that writes the
// most of it wins, the first on a tie; when none does, the first file's
// line 1.
func (l *locator) find(path ...string) (string, int) {
	l.parse()
	bestFile, bestLine, bestDepth := l.files[0], 1, -1
	for i, root := range l.roots {
		if root == nil {
			continue
		}
		node, line, depth := root, 0, 0
		for _, key := range path {
			value, keyLine := l.lookupKey(node, key)
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
func (l *locator) lookupKey(n *yaml.Node, key string) (*yaml.Node, int) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, 0
	}
	index, ok := l.keys[n]
	if !ok {
		index = make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			if _, dup := index[n.Content[i].Value]; !dup { // the first wins, as before
				index[n.Content[i].Value] = i
			}
		}
		l.keys[n] = index
	}
	if i, ok := index[key]; ok {
		return n.Content[i+1], n.Content[i].Line
	}
	return nil, 0
}
