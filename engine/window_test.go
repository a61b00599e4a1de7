package engine

import (
	"testing"
	"time"
)

func TestWindowAt(t *testing.T) {
	base := time.Unix(1_700_000_000, 0) // a multiple of 10 s
	tests := []struct {
		name          string
		t             time.Time
		cycle, offset time.Duration
		want          int64
		start         time.Time
	}{
		{"window start", base, 10 * time.Second, 0, 170_000_000, base},
		{"last nanosecond", base.Add(10*time.Second - 1), 10 * time.Second, 0, 170_000_000, base},
		{"next window", base.Add(10 * time.Second), 10 * time.Second, 0, 170_000_001, base.Add(10 * time.Second)},
		{"offset shifts the start", base.Add(2 * time.Second), 10 * time.Second, 3 * time.Second, 169_999_999, base.Add(-7 * time.Second)},
		{"offset boundary", base.Add(3 * time.Second), 10 * time.Second, 3 * time.Second, 170_000_000, base.Add(3 * time.Second)},
		{"before the epoch floors", time.Unix(0, -1), time.Second, 0, -1, time.Unix(-1, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, start, end := WindowAt(tt.t, tt.cycle, tt.offset)
			if k != tt.want || !start.Equal(tt.start) || end.Sub(start) != tt.cycle {
				t.Fatalf("WindowAt(%v) = %d [%v, %v), want %d from %v", tt.t, k, start, end, tt.want, tt.start)
			}
			if tt.t.Before(start) || !tt.t.Before(end) {
				t.Fatalf("%v not in [%v, %v)", tt.t, start, end)
			}
		})
	}
}
