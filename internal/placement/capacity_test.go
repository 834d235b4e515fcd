package placement

import (
	"reflect"
	"testing"
)

func TestBelieveCapacities(t *testing.T) {
	gi := int64(1 << 30)
	caps := Resources{Memory: 64 * gi, MilliCPU: 32_000}
	small := Resources{Memory: 8 * gi, MilliCPU: 4000}
	huge := Resources{Memory: 9e18, MilliCPU: 9e18}
	tests := []struct {
		name   string
		claims []CapacityClaim
		want   []CapacityBelief
	}{{
		name:   "a report within its baseline and the caps is believed",
		claims: []CapacityClaim{{Reported: small, Baseline: small}},
		want:   []CapacityBelief{{Believed: small, Source: CapacityReported}},
	}, {
		name:   "a jump above the baseline is held to it",
		claims: []CapacityClaim{{Reported: huge, Baseline: small}},
		want:   []CapacityBelief{{Believed: small, Source: CapacityLimited, AboveBaseline: true, AboveCap: true}},
	}, {
		name:   "a report above the caps without a baseline is held to the caps",
		claims: []CapacityClaim{{Reported: huge}},
		want:   []CapacityBelief{{Believed: caps, Source: CapacityLimited, AboveCap: true}},
	}, {
		name:   "a smaller report than the baseline is believed",
		claims: []CapacityClaim{{Reported: Resources{Memory: gi, MilliCPU: 1000}, Baseline: small}},
		want:   []CapacityBelief{{Believed: Resources{Memory: gi, MilliCPU: 1000}, Source: CapacityReported}},
	}, {
		name:   "a pin is believed whatever the report",
		claims: []CapacityClaim{{Reported: huge, Baseline: small, Pinned: Resources{Memory: 128 * gi, MilliCPU: 64_000}}},
		want:   []CapacityBelief{{Believed: Resources{Memory: 128 * gi, MilliCPU: 64_000}, Source: CapacityPinned}},
	}, {
		name:   "a report without a capacity keeps the baseline",
		claims: []CapacityClaim{{Baseline: small}},
		want:   []CapacityBelief{{Believed: small, Source: CapacityBaseline}},
	}, {
		name: "a host that never said is as small as the smallest known",
		claims: []CapacityClaim{{Reported: small, Baseline: small}, {},
			{Reported: Resources{Memory: 16 * gi, MilliCPU: 2000}, Baseline: Resources{Memory: 16 * gi, MilliCPU: 2000}}},
		want: []CapacityBelief{{Believed: small, Source: CapacityReported}, {Believed: Resources{Memory: 8 * gi, MilliCPU: 2000}, Source: CapacityAssumed},
			{Believed: Resources{Memory: 16 * gi, MilliCPU: 2000}, Source: CapacityReported}},
	}, {
		name:   "a fleet where nobody said assumes the caps",
		claims: []CapacityClaim{{}, {}},
		want:   []CapacityBelief{{Believed: caps, Source: CapacityAssumed}, {Believed: caps, Source: CapacityAssumed}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BelieveCapacities(tt.claims, caps, Resources{}); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("BelieveCapacities = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
