package engine

import (
	"math"
	"testing"
	"time"
)

func TestJudgeWindow(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		capacity                  int64
		demands, weights, granted []float64
		want                      WindowFairness
	}{
		{"nobody counted", 40, nil, nil, nil, WindowFairness{}},
		{"the worked example's first window: A lends 8, B is held at 10 of 15",
			40, []float64{2, 15, 10, 10}, []float64{1, 1, 1, 1}, []float64{2, 10, 10, 10},
			WindowFairness{Judged: true, Lent: 8, HeldBelow: 1, Jain: 3.6666666666666665 * 3.6666666666666665 / (4 * (3 + 4.0/9))}},
		{"B borrows what A lent: max-min exactly",
			40, []float64{2, 40, 10, 10}, []float64{1, 1, 1, 1}, []float64{2, 18, 10, 10},
			WindowFairness{Judged: true, Lent: 8, Borrowed: 8, HeldBelow: 1, Jain: 1}},
		{"one client took everything from four that asked alike",
			40, []float64{40, 40, 40, 40}, []float64{1, 1, 1, 1}, []float64{40, 0, 0, 0},
			WindowFairness{Judged: true, Lent: 30, Borrowed: 30, HeldBelow: 3, Jain: 0.25}},
		{"weights: an equal share is capacity × w / W",
			30, []float64{30, 30}, []float64{2, 1}, []float64{20, 10},
			WindowFairness{Judged: true, HeldBelow: 2, Jain: 1}},
		{"idle clients lend their whole share and are not judged by Jain",
			30, []float64{0, 0, 30}, []float64{1, 1, 1}, []float64{0, 0, 30},
			WindowFairness{Judged: true, Lent: 20, Borrowed: 20, Jain: 1}},
	} {
		c := &closedScratch{demands: tc.demands, weights: tc.weights, granted: tc.granted}
		got := judgeWindow(tc.capacity, c)
		if got.Judged != tc.want.Judged || got.Lent != tc.want.Lent || got.Borrowed != tc.want.Borrowed ||
			got.HeldBelow != tc.want.HeldBelow || math.Abs(got.Jain-tc.want.Jain) > 1e-9 {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The roller of a window tells how the window it closed went, once: the
// worked example's first window, judged when the second is planned.
func TestRolloverJudgesTheClosedWindow(t *testing.T) {
	obs := &rollovers{}
	l, err := New(testConfig(), NewMemStore(), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	clients := []string{"A", "B", "C", "D"}
	if err := l.RegisterAt(t0, clients...); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{2, 15, 10, 10} {
		send(l, t0.Add(time.Second), clients[i], n)
	}
	l.TickAt(t0.Add(10 * time.Second))
	var judged []WindowFairness
	for _, ev := range obs.events {
		if ev.Closed.Judged {
			judged = append(judged, ev.Closed)
		}
	}
	if len(judged) != 1 {
		t.Fatalf("%d windows judged, want the first one once: %+v", len(judged), obs.events)
	}
	if j := judged[0]; j.Lent != 8 || j.Borrowed != 0 || j.HeldBelow != 1 || j.Jain < 0.97 || j.Jain > 0.98 {
		t.Errorf("the first window: %+v, want A lending 8 and B held at 10 of 15 (Jain 0.976)", j)
	}
}

type rollovers struct {
	NopObserver
	events []RolloverEvent
}

func (r *rollovers) Rollover(ev RolloverEvent) { r.events = append(r.events, ev) }
