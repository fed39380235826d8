package translate

import "go.yaml.in/yaml/v3"

// fields walks a mapping, reporting unknown and repeated fields.
func (t *translator) fields(file string, n *yaml.Node, path string, set func(key string, k, v *yaml.Node, p string) bool) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			t.fail(file, k, p, "repeated field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode {
			t.fail(file, v, p, "YAML aliases are not supported")
			continue
		}
		if !set(k.Value, k, v, p) {
			t.fail(file, k, p, "unknown field")
		}
	}
}

func join(path, f string) string {
	if path == "" {
		return f
	}
	return path + "." + f
}

func (t *translator) str(file string, n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		t.fail(file, n, path, "must be a string")
		return "", false
	}
	return n.Value, true
}

func (t *translator) boolean(file string, n *yaml.Node, path string) bool {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		t.fail(file, n, path, "must be true or false")
		return false
	}
	return v
}

// level is one level of a descriptor's path.
type level struct {
	key, value string
	path       string // of its key field
	// share: a wildcard value whose values share one bucket
	// (share_threshold).
	share bool
}
