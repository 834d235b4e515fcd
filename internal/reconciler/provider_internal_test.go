package reconciler

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/resource"
)

// jsonValue draws a value of the kinds inputs hold, including Go types that
// only the canonical JSON comparison understands ([]string, float32, ...).
func jsonValue(depth int) *rapid.Generator[any] {
	scalars := []*rapid.Generator[any]{
		rapid.Just[any](nil),
		rapid.Just[any](map[string]any(nil)), // both encode as null
		rapid.Just[any]([]any(nil)),
		rapid.Just[any](map[string]any{}),
		rapid.Just[any]([]any{}),
		rapid.Map(rapid.Bool(), func(b bool) any { return b }),
		rapid.Map(rapid.SampledFrom([]string{"", "a", "b", "1", "<&>"}), func(s string) any { return s }),
		rapid.Map(rapid.IntRange(-2, 2), func(i int) any { return i }),
		rapid.Map(rapid.IntRange(-2, 2), func(i int) any { return float64(i) }),
		rapid.Map(rapid.IntRange(-2, 2), func(i int) any { return int64(i) }),
		rapid.Map(rapid.IntRange(-2, 2), func(i int) any { return uint(i + 2) }),
		rapid.Map(rapid.SampledFrom([]float64{0.1, 0.5, 1e21, 1.0000000001}), func(f float64) any { return f }),
		rapid.Map(rapid.SampledFrom([]float32{0.1, 1, 2.5}), func(f float32) any { return f }),
		rapid.Map(rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b"}), 0, 2), func(s []string) any { return s }),
		rapid.Map(rapid.MapOfN(rapid.SampledFrom([]string{"a", "b"}), rapid.SampledFrom([]string{"x", "y"}), 0, 2), func(m map[string]string) any { return m }),
	}
	if depth == 0 {
		return rapid.OneOf(scalars...)
	}
	inner := jsonValue(depth - 1)
	return rapid.OneOf(append(scalars,
		rapid.Map(rapid.SliceOfN(inner, 0, 3), func(s []any) any { return s }),
		rapid.Map(rapid.MapOfN(rapid.SampledFrom([]string{"a", "b", "c"}), inner, 0, 3), func(m map[string]any) any { return m }),
	)...)
}

func TestPropertyDiffInputsAgreesWithEqual(t *testing.T) {
	inputs := rapid.MapOfN(rapid.SampledFrom([]string{"image", "env", "replicas", "x"}), jsonValue(2), 0, 4)
	rapid.Check(t, func(t *rapid.T) {
		a := inputs.Draw(t, "a")
		var b map[string]any
		if rapid.Bool().Draw(t, "related") {
			// Mostly equal: a copy with a few keys redrawn, so equal and
			// nearly equal pairs are common.
			b = resource.Clone(a)
			for _, k := range rapid.SliceOfN(rapid.SampledFrom([]string{"image", "env", "replicas", "x"}), 0, 2).Draw(t, "redrawn") {
				b[k] = jsonValue(2).Draw(t, "value")
			}
		} else {
			b = inputs.Draw(t, "b")
		}
		var want []string
		for _, k := range []string{"env", "image", "replicas", "x"} {
			va, inA := a[k]
			vb, inB := b[k]
			if inA != inB || (inA && !resource.Equal(map[string]any{k: va}, map[string]any{k: vb})) {
				want = append(want, k)
			}
		}
		got := DiffInputs(a, b)
		if len(got) != len(want) {
			t.Fatalf("DiffInputs(%#v, %#v) = %v, want %v", a, b, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("DiffInputs(%#v, %#v) = %v, want %v", a, b, got, want)
			}
		}
	})
}
