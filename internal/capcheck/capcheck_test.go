package capcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCheckerFindsEachViolation(t *testing.T) {
	tests := []struct {
		name string
		adm  []Admission
		want []Kind
	}{
		{"within both", []Admission{{Window: 1, Period: 1, Client: "a", Share: 2}, {Window: 1, Period: 1, Client: "a", Share: 2}}, nil},
		{"over share", []Admission{{Window: 1, Period: 1, Client: "a", Share: 1}, {Window: 1, Period: 1, Client: "a", Share: 1}}, []Kind{OverShare}},
		{"cost counts units", []Admission{{Window: 1, Period: 1, Client: "a", Share: 4, Cost: 5}}, []Kind{OverCapacity, OverShare}},
		{"over capacity across periods", []Admission{
			{Window: 7, Period: 1, Client: "a", Share: 3, Cost: 3},
			{Window: 7, Period: 2, Client: "a", Share: 3, Cost: 2},
		}, []Kind{OverCapacity}},
		{"windows are separate", []Admission{
			{Window: 7, Period: 1, Client: "a", Share: 4, Cost: 4},
			{Window: 8, Period: 2, Client: "a", Share: 4, Cost: 4},
		}, nil},
		{"mixed shares", []Admission{{Window: 1, Period: 1, Client: "a", Share: 1}, {Window: 1, Period: 1, Client: "a", Share: 2}}, []Kind{MixedShares}},
		{"no client: window only", []Admission{{Window: 1, Cost: 4}}, nil},
		{"no client still fills the window", []Admission{{Window: 1, Cost: 4}, {Window: 1, Period: 1, Client: "a", Share: 1}}, []Kind{OverCapacity}},
		{"edge admissions are tolerated", []Admission{
			{Window: 2, Period: 1, Client: "a", Share: 4, Cost: 4},
			{Window: 2, Period: 2, Client: "b", Share: 4, Cost: 2, Edge: true},
		}, nil},
		{"only edge admissions are tolerated", []Admission{
			{Window: 2, Period: 1, Client: "a", Share: 4, Cost: 4},
			{Window: 2, Period: 2, Client: "b", Share: 4, Cost: 2, Edge: true},
			{Window: 2, Period: 2, Client: "c", Share: 4, Cost: 1},
		}, []Kind{OverCapacity}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(4)
			for _, a := range tt.adm {
				c.Admit(a)
			}
			var got []Kind
			for _, v := range c.Violations() {
				got = append(got, v.Kind)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("violations %v, want %v (%v)", got, tt.want, c.Violations())
			}
		})
	}
}

func TestWorstWindow(t *testing.T) {
	c := New(10)
	if w, n := c.WorstWindow(); w != 0 || n != 0 {
		t.Fatalf("empty checker: worst window %d with %d", w, n)
	}
	for i, n := range []int64{3, 9, 9, 2} {
		c.Admit(Admission{Window: int64(i), Period: uint64(i), Client: "a", Share: 10, Cost: n})
	}
	if w, n := c.WorstWindow(); w != 1 || n != 9 {
		t.Fatalf("worst window %d with %d, want window 1 with 9", w, n)
	}
	if got := c.Admitted(); got != 23 {
		t.Fatalf("admitted %d, want 23", got)
	}
}

func TestWindowsAndEdges(t *testing.T) {
	c := New(3)
	c.Admit(Admission{Window: 5, Client: "a", Share: 9, Cost: 2})
	c.Admit(Admission{Window: 4, Client: "a", Share: 9, Edge: true, Cost: 3})
	c.Admit(Admission{Window: 5, Client: "b", Share: 9, Edge: true, Cost: 2})
	if got := fmt.Sprint(c.Windows()); got != "[4 5]" {
		t.Fatalf("windows %s, want [4 5]", got)
	}
	if c.WindowEdge(4) != 3 || c.WindowEdge(5) != 2 || c.WindowAdmitted(5) != 4 {
		t.Fatalf("window 4: edge %d; window 5: edge %d of %d", c.WindowEdge(4), c.WindowEdge(5), c.WindowAdmitted(5))
	}
	// Window 5 admitted 4 > 3, but 2 of them may belong to window 4.
	if vs := c.Violations(); len(vs) != 0 {
		t.Fatalf("violations %v", vs)
	}
	c.Admit(Admission{Window: 5, Client: "c", Share: 9, Cost: 2})
	vs := c.Violations()
	if len(vs) != 1 || vs[0].String() != "window 5: admitted 6 > capacity 3 + 2 at the edge" {
		t.Fatalf("violations %v", vs)
	}
}

type recorder struct{ lines []string }

func (r *recorder) Helper()                      {}
func (r *recorder) Errorf(f string, args ...any) { r.lines = append(r.lines, fmt.Sprintf(f, args...)) }

func TestCheckReportsEveryViolationBounded(t *testing.T) {
	c := New(1)
	for w := int64(0); w < 30; w++ {
		c.Admit(Admission{Window: w, Period: uint64(w), Client: "a", Share: 5, Cost: 2})
	}
	var r recorder
	c.Check(&r)
	if len(r.lines) != 21 || !strings.Contains(r.lines[20], "10 more") {
		t.Fatalf("Check printed %d lines, last %q", len(r.lines), r.lines[len(r.lines)-1])
	}
	if !strings.Contains(r.lines[0], "window 0: admitted 2 > capacity 1") {
		t.Fatalf("first line %q", r.lines[0])
	}
}

// SlidingMost over intervals that are half-open, that span an aligned
// window's boundary, and over times out of order.
func TestSlidingMost(t *testing.T) {
	epoch := time.Unix(1_700_000_000, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, epoch.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, tc := range []struct {
		times []time.Time
		want  int
	}{
		{nil, 0},
		{at(0), 1},
		{at(0, 999, 1000), 2},               // [t, t+1s) is half-open
		{at(900, 950, 1000, 1050, 1899), 5}, // the end of one window and the start of the next
		{at(0, 500, 1500, 1600, 1700), 3},
		{at(1700, 0, 1600, 500, 1500), 3}, // out of order
	} {
		if got := SlidingMost(tc.times, time.Second); got != tc.want {
			t.Errorf("SlidingMost(%v) = %d, want %d", tc.times, got, tc.want)
		}
	}
}
