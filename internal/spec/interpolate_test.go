package spec

import (
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/resource"
)

func testInterpolation(outputs bool) interpolation {
	env := map[string]string{"REGION": "us", "EMPTY": "", "BRACES": "a${b}c"}
	return interpolation{
		env: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		defined: defined{
			resource.Egg:     {"db": true, "web": true},
			resource.Volume:  {"pgdata": true},
			resource.Network: {"backend": true, "default": true},
			resource.Secret:  {"api_key": true},
		},
		outputs: outputs,
	}
}

func TestInterpolateTranslates(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		refs []string
	}{
		{"plain text is unchanged", "hello", "hello", nil},
		{"egg output", "postgres://app@${db.address}/shop", "postgres://app@${egg/db.address}/shop", []string{"${egg/db.address}"}},
		{"egg hosts", "${db.hosts}", "${egg/db.hosts}", []string{"${egg/db.hosts}"}},
		{"volume output", "${volume.pgdata.host}", "${volume/pgdata.host}", []string{"${volume/pgdata.host}"}},
		{"network output", "${network.backend.name}", "${network/backend.name}", []string{"${network/backend.name}"}},
		{"a secret is its handle", "key=${secret.api_key}", "key=${secret/api_key.handle}", []string{"${secret/api_key.handle}"}},
		{"env is substituted", "region-${env.REGION}", "region-us", nil},
		{"env default when unset", "${env.NOPE:-eu}", "eu", nil},
		{"env default when empty", "${env.EMPTY:-eu}", "eu", nil},
		{"empty env without default is empty", "[${env.EMPTY}]", "[]", nil},
		{"set env ignores the default", "${env.REGION:-eu}", "us", nil},
		{"env values are literal text", "${env.BRACES}", "a$${b}c", nil},
		{"$$ is a literal $", "cost: $$5", "cost: $5", nil},
		{"$${ is a literal ${, escaped for inputs", "$${HOME}", "$${HOME}", nil},
		{"a lone $ stays", "echo $HOME and $", "echo $HOME and $", nil},
		{"two references", "${db.address},${web.address}", "${egg/db.address},${egg/web.address}", []string{"${egg/db.address}", "${egg/web.address}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, refs, err := testInterpolation(true).interpolate(tt.in)
			if err != nil {
				t.Fatalf("interpolate(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("interpolate(%q) = %q, want %q", tt.in, got, tt.want)
			}
			var refStrings []string
			for _, r := range refs {
				refStrings = append(refStrings, r.String())
			}
			if !reflect.DeepEqual(refStrings, tt.refs) {
				t.Errorf("refs = %v, want %v", refStrings, tt.refs)
			}
		})
	}
}

func TestInterpolateRefuses(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		outputs bool
		words   []string
	}{
		{"unclosed", "${db.address", true, []string{`unclosed "${"`, `"$${"`}},
		{"undefined egg, with the closest name", "${dbb.address}", true, []string{`egg "dbb", which is not defined`, `did you mean "db"?`}},
		{"unknown egg output", "${db.port}", true, []string{`no output "port"`, "address and hosts"}},
		{"unknown volume output", "${volume.pgdata.path}", true, []string{`no output "path"`, "name and host"}},
		{"undefined network", "${network.front.name}", true, []string{`network "front", which is not defined`}},
		{"secret with an output", "${secret.api_key.value}", true, []string{"write ${secret.api_key}"}},
		{"egg prefix", "${egg.db.address}", true, []string{"write ${db.address}"}},
		{"routes have no outputs", "${route.shop.localhost}", true, []string{"routes have no outputs"}},
		{"not a reference", "${HOME}", true, []string{"is not a reference", "${env.NAME}"}},
		{"unset env", "${env.NOPE}", true, []string{"NOPE is not set", "${env.NOPE:-value}"}},
		{"bad env name", "${env.1X}", true, []string{`"1X" is not a variable name`}},
		{"outputs where they are not known yet", "${db.address}", false, []string{"known only at deploy time", "env, command"}},
		{"a literal $ right before a reference", "$$${db.address}", true, []string{`literal "$" right before`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := testInterpolation(tt.outputs).interpolate(tt.in)
			if err == nil {
				t.Fatalf("interpolate(%q) succeeded, want an error", tt.in)
			}
			for _, w := range tt.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Literal text survives the trip through the input encoding: what the loader
// escapes, the resource package gives back as written, and finds no
// reference in.
func TestEscapeRoundTripsThroughResolve(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		literal := rapid.StringOf(rapid.SampledFrom([]rune{'$', '{', '}', 'a', '.', '/'})).Draw(t, "literal")
		inputs := map[string]any{"v": escape(literal)}
		refs, err := resource.Refs(inputs)
		if err != nil || len(refs) != 0 {
			t.Fatalf("Refs(%q) = %v, %v; want none", escape(literal), refs, err)
		}
		got, err := resource.Resolve(inputs, func(r resource.Ref) (any, error) {
			t.Fatalf("lookup of %v in literal text", r)
			return nil, nil
		})
		if err != nil || got["v"] != literal {
			t.Fatalf("Resolve(escape(%q)) = %q, %v", literal, got["v"], err)
		}
		if unescape(escape(literal)) != literal {
			t.Fatalf("unescape(escape(%q)) = %q", literal, unescape(escape(literal)))
		}
	})
}

// A string the user writes from literal pieces ("$$" for "$") and references
// resolves, after translation, to the pieces with each reference's value.
func TestInterpolateThenResolve(t *testing.T) {
	ip := testInterpolation(true)
	refs := []string{"db.address", "volume.pgdata.name", "secret.api_key", "env.REGION"}
	// The outputs the reconciler would resolve, by canonical reference, and
	// the value each user reference stands for in the end.
	values := map[string]string{
		"${egg/db.address}":        "db:5432",
		"${volume/pgdata.name}":    "hatch-shop-pgdata-1a2b",
		"${secret/api_key.handle}": "handle:42",
	}
	valueOf := map[string]string{
		"db.address":         "db:5432",
		"volume.pgdata.name": "hatch-shop-pgdata-1a2b",
		"secret.api_key":     "handle:42",
		"env.REGION":         "us",
	}
	rapid.Check(t, func(t *rapid.T) {
		var written, want strings.Builder
		pieces := rapid.IntRange(0, 6).Draw(t, "pieces")
		lastLiteralEndsInDollar := false
		for i := 0; i < pieces; i++ {
			if rapid.Bool().Draw(t, "isRef") && !lastLiteralEndsInDollar {
				r := rapid.SampledFrom(refs).Draw(t, "ref")
				written.WriteString("${" + r + "}")
				want.WriteString(valueOf[r])
				lastLiteralEndsInDollar = false
				continue
			}
			lit := rapid.StringOf(rapid.SampledFrom([]rune{'$', '{', '}', 'x', ':'})).Draw(t, "literal")
			if lit == "" {
				continue
			}
			// Written form: every "$" doubled, so nothing in it is a reference.
			written.WriteString(strings.ReplaceAll(lit, "$", "$$"))
			want.WriteString(lit)
			lastLiteralEndsInDollar = strings.HasSuffix(lit, "$")
		}
		got, _, err := ip.interpolate(written.String())
		if err != nil {
			t.Fatalf("interpolate(%q): %v", written.String(), err)
		}
		resolved, err := resource.Resolve(map[string]any{"v": got}, func(r resource.Ref) (any, error) {
			return values[r.String()], nil
		})
		if err != nil {
			t.Fatalf("Resolve(%q): %v", got, err)
		}
		if resolved["v"] != want.String() {
			t.Fatalf("%q -> %q -> %q, want %q", written.String(), got, resolved["v"], want.String())
		}
	})
}
