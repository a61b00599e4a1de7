package filter

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

func TestParseWindows(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 10000, "cycle": "24h"}], "name": "api"}`))
	if err != nil {
		t.Fatal(err)
	}
	ws := cfg.EngineWindows()
	if len(ws) != 2 || ws[0].Label != "24h" || ws[1].Label != "1s" {
		t.Fatalf("windows %+v, want 24h then 1s", ws)
	}
	day, second := ws[0].Engine, ws[1].Engine
	if day.Capacity != 10000 || day.Cycle != 24*time.Hour || day.MinCycle != time.Minute || day.KeyPrefix != "borrowcycle/api/24h" {
		t.Errorf("day window %+v", day)
	}
	if second.Capacity != 10 || second.Cycle != time.Second || second.MinCycle != 100*time.Millisecond || second.KeyPrefix != "borrowcycle/api/1s" {
		t.Errorf("second window %+v", second)
	}
	if cfg.Engine.Cycle != time.Second || cfg.HousekeepingPeriod() != 100*time.Millisecond {
		t.Errorf("the limit's own cycle %v and tick %v, want the shortest window's", cfg.Engine.Cycle, cfg.HousekeepingPeriod())
	}
	// A given min_cycle applies to every window; one window is the
	// single form.
	cfg, err = ParseConfig([]byte(`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 50, "cycle": "10s"}], "min_cycle": "50ms"}`))
	if err != nil || cfg.Windows[0].Engine.MinCycle != 50*time.Millisecond || cfg.Windows[1].Engine.MinCycle != 50*time.Millisecond {
		t.Errorf("min_cycle given: %+v, %v", cfg.Windows, err)
	}
	single, _ := ParseConfig([]byte(`{"capacity": 10, "cycle": "1s"}`))
	if ws := single.EngineWindows(); len(ws) != 1 || ws[0].Label != "" || ws[0].Engine.KeyPrefix != "borrowcycle/default" {
		t.Errorf("single form: %+v", ws)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"capacity": 5, "windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 50, "cycle": "10s"}]}`, "capacity: not allowed with windows: each window gives its own capacity and cycle"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}]}`, "windows: must hold 2 to 4 windows, got 1 (one window is capacity and cycle)"},
		{`{"windows": {}}`, "windows: must be an array, got an object"},
		{`{"windows": null, "capacity": 10, "cycle": "1s"}`, "windows: must be an array, got null"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, 5]}`, "windows[1]: must be an object, got a number"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 10, "cycle": "1s"}]}`, "windows[1].cycle: duplicate of windows[0].cycle 1s"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 10, "cycle": "2s", "burst": 1}]}`, "windows[1].burst: unknown field: a window has only capacity and cycle"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"cycle": "2s"}]}`, "windows[1].capacity: required"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 10, "cycle": "200h"}]}`, "windows[1].cycle: must be in [1ms, 168h0m0s], got 200h0m0s"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 3, "cycle": "2s"}], "cost": 4}`, "windows[1].capacity: must be at least cost (4), got 3"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 30, "cycle": "2s"}], "max_share": 4}`, "max_share: not supported with windows: give each window its own limit"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 30, "cycle": "2s"}], "fleet": {"cluster": "g", "capacity": 100, "fallback_capacity": 5}}`, "windows: not supported with fleet"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 30, "cycle": "2s"}], "window_offset": "1s"}`, "window_offset: must be in [0s, 1s), got 1s"},
		{`{"capacity": 5, "cycle": "1s", "limits": [{"name": "a", "windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 10, "cycle": "1s"}]}]}`, "limits[0].windows[1].cycle: duplicate of windows[0].cycle 1s"},
	} {
		_, err := ParseSettings([]byte(tc.json))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%.90s: error %v, want %q", tc.json, err, tc.want)
		}
	}
}

// TestWindowsInherited: a limit that gives windows takes no capacity or
// cycle from the top level, and one that gives either takes no windows.
func TestWindowsInherited(t *testing.T) {
	s, err := ParseSettings([]byte(`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 50, "cycle": "10s"}],
		"limits": [{"name": "a", "match": {"path_prefix": "/a"}}, {"name": "b", "match": {"path_prefix": "/b"}, "capacity": 7, "cycle": "2s"},
		{"name": "c", "capacity": 3, "cycle": "1s", "windows": [{"capacity": 4, "cycle": "1s"}, {"capacity": 9, "cycle": "1m"}]}]}`))
	if err == nil || !strings.HasPrefix(err.Error(), "limits[2].capacity: not allowed with windows") {
		t.Fatalf("a limit giving windows and capacity: %v", err)
	}
	s, err = ParseSettings([]byte(`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 50, "cycle": "10s"}],
		"limits": [{"name": "a", "match": {"path_prefix": "/a"}}, {"name": "b", "capacity": 7, "cycle": "2s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Limits[0]; len(a.Windows) != 2 || a.Windows[1].Engine.KeyPrefix != "borrowcycle/a/1s" {
		t.Errorf("a: %+v", a.Windows)
	}
	if b := s.Limits[1]; b.Windows != nil || b.Engine.Capacity != 7 || b.Engine.Cycle != 2*time.Second {
		t.Errorf("b: windows %+v, engine %d per %v", b.Windows, b.Engine.Capacity, b.Engine.Cycle)
	}
}

func TestWindowLabel(t *testing.T) {
	for cycle, want := range map[time.Duration]string{
		time.Second: "1s", 10 * time.Second: "10s", time.Minute: "1m", 24 * time.Hour: "24h", 90 * time.Minute: "1h30m",
		1500 * time.Millisecond: "1_5s", 500 * time.Millisecond: "500ms", 168 * time.Hour: "168h", time.Hour + 30*time.Second: "1h30s",
		time.Hour: "1h", 10 * time.Minute: "10m", 2*time.Hour + 500*time.Millisecond: "2h0_5s", time.Hour + time.Minute: "1h1m",
	} {
		if got := WindowLabel(cycle); got != want {
			t.Errorf("WindowLabel(%v) = %q, want %q", cycle, got, want)
		}
	}
}

// TestWindowsDecide: 3 a second and 5 per 10 s, one client. Every
// request passes both windows or neither: one the second refuses takes
// nothing from the 10 s window. The headers name the binding window.
func TestWindowsDecide(t *testing.T) {
	f, clock := mustFilter(t, `{"windows": [{"capacity": 3, "cycle": "1s"}, {"capacity": 5, "cycle": "10s"}], "rate_limit_headers": "ietf", "name": "api"}`)
	clock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Millisecond))
	req := headers{{"x-client-id", "alice"}}
	send := func(n int) (admitted int, last Outcome) {
		for range n {
			last = f.Decide(req)
			if last.Decision.Allowed {
				admitted++
			}
			clock.Advance(time.Millisecond)
		}
		return admitted, last
	}
	// Second 0: the second's 3, then refused by the 1 s window.
	if n, last := send(10); n != 3 || last.Decision.Reason != engine.ReasonOverLimit || last.Window != 1 || last.Decision.RetryAfter > time.Second {
		t.Fatalf("second 0: %d admitted, last %+v, want 3 and the 1 s window refusing", n, last)
	}
	// Second 1: the 10 s window's last 2 (its 7 refused requests took
	// nothing), then refused by the 10 s window, told its end.
	clock.Set(time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC).Add(time.Millisecond))
	n, last := send(10)
	if n != 2 || last.Decision.Reason != engine.ReasonOverLimit || last.Window != 0 {
		t.Fatalf("second 1: %d admitted, last %+v, want 2 and the 10 s window refusing", n, last)
	}
	if ra := last.Decision.RetryAfter; ra < 8*time.Second || ra > 9*time.Second {
		t.Errorf("retry after %v, want the 10 s window's end, about 9 s", ra)
	}
	reply := f.Reply(last)
	want := [][2]string{{"ratelimit-policy", `"api/10s";q=5;w=10`}, {"ratelimit", `"api/10s";r=0;t=9`}}
	if got := reply.Headers[len(reply.Headers)-2:]; !reflect.DeepEqual(got, want) {
		t.Errorf("refused by the 10 s window: headers %v, want %v", got, want)
	}
	// The next window of 10 s: an admitted request reports both policies
	// and the binding one, the second with 2 left after it.
	clock.Set(time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC).Add(time.Millisecond))
	o := f.Decide(req)
	if !o.Decision.Allowed || o.Window != 1 {
		t.Fatalf("next window: %+v, want admitted, the 1 s window binding", o)
	}
	want = [][2]string{{"ratelimit-policy", `"api/10s";q=5;w=10, "api/1s";q=3;w=1`}, {"ratelimit", `"api/1s";r=2;t=1`}}
	if got := f.ResponseHeaders(o); !reflect.DeepEqual(got, want) {
		t.Errorf("admitted: headers %v, want %v", got, want)
	}
}

// An error inside windows inherited from the top level names the top
// level's field, as for every other inherited field.
func TestInheritedWindowsErrorsNameTheTopLevel(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 10, "cycle": "1s"}], "limits": [{"name": "a"}]}`,
			"windows[1].cycle: duplicate of windows[0].cycle 1s"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"cycle": "2s"}], "limits": [{"name": "a"}]}`,
			"windows[1].capacity: required"},
		{`{"windows": [{"capacity": 10, "cycle": "1s"}, {"capacity": 3, "cycle": "2s"}], "cost": 4, "limits": [{"name": "a"}]}`,
			"windows[1].capacity: must be at least cost (4), got 3"},
	} {
		_, err := ParseSettings([]byte(tc.json))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%.70s: error %v, want %q", tc.json, err, tc.want)
		}
	}
}

// With windows, cost and caps are checked against the windows, not
// against the shortest window's capacity as if it were the limit's.
func TestWindowsErrorsNameTheWindow(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"windows": [{"capacity": 100, "cycle": "1h"}, {"capacity": 2, "cycle": "1s"}], "cost": 5}`,
			"windows[1].capacity: must be at least cost (5), got 2"},
		{`{"windows": [{"capacity": 100, "cycle": "1h"}, {"capacity": 2, "cycle": "1s"}], "max_share": 50}`,
			"max_share: not supported with windows: give each window its own limit"},
	} {
		_, err := ParseSettings([]byte(tc.json))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%.70s: error %v, want %q", tc.json, err, tc.want)
		}
	}
}

// TestWindowsAccessLog: the record of a limit of several windows names the
// window whose decision it is.
func TestWindowsAccessLog(t *testing.T) {
	f, clock := mustFilter(t, `{"windows": [{"capacity": 1, "cycle": "1s"}, {"capacity": 5, "cycle": "10s"}], "name": "api"}`)
	clock.Advance(time.Millisecond)
	req := headers{{"x-client-id", "alice"}}
	f.Decide(req)
	o := f.Decide(req)
	if got, want := string(f.AccessLog(o)), "limit=api action=rejected reason=over_limit window=1s share=1 remaining=0 client="; !strings.HasPrefix(got, want) {
		t.Errorf("record %q, want it to start %q", got, want)
	}
}

// TestWindowsHold: with max_wait, a request the shortest window refuses is
// held, and decided again in every window once its unit comes.
func TestWindowsHold(t *testing.T) {
	f, clock := mustFilter(t, `{"windows": [{"capacity": 2, "cycle": "1s"}, {"capacity": 100, "cycle": "1m"}], "max_wait": "1s"}`)
	clock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(500 * time.Millisecond))
	req := headers{{"x-client-id", "alice"}}
	f.Decide(req)
	f.Decide(req)
	o := f.Decide(req)
	wait, ok := f.Hold(o, 0)
	if !ok || o.Window != 1 || wait != 500*time.Millisecond {
		t.Fatalf("third request: %+v, hold %v %t; want refused by the 1 s window and held for 500ms", o, wait, ok)
	}
	clock.Advance(wait)
	if again := f.Redecide(o, wait); !again.Decision.Allowed || again.Waited != wait {
		t.Errorf("decided again after %v: %+v, want admitted by both windows", wait, again)
	}
}
