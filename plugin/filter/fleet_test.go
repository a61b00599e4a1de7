package filter

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

func TestFleetConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"capacity": 100, "cycle": "10s",
		"fleet": {"cluster": "gubernator", "capacity": 300, "fallback_capacity": 20}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Fleet{Capacity: 300, Fallback: 20, SyncInterval: 500 * time.Millisecond, Timeout: 250 * time.Millisecond}
	if cfg.Engine.Fleet == nil || *cfg.Engine.Fleet != want || cfg.FleetCluster != "gubernator" {
		t.Fatalf("fleet %+v cluster %q, want %+v", cfg.Engine.Fleet, cfg.FleetCluster, want)
	}
	if cfg.TickPeriod() != 500*time.Millisecond {
		t.Errorf("tick period %s, want the sync interval", cfg.TickPeriod())
	}
	plain, err := ParseConfig([]byte(`{"capacity": 100, "cycle": "10s"}`))
	if err != nil || plain.Engine.Fleet != nil || plain.TickPeriod() != time.Second {
		t.Errorf("without fleet: %+v, tick %s, %v", plain.Engine.Fleet, plain.TickPeriod(), err)
	}
}

func TestFleetConfigErrorsNameTheField(t *testing.T) {
	const ok = `"cluster": "g", "capacity": 300, "fallback_capacity": 20`
	tests := []struct{ fleet, field string }{
		{`[]`, "fleet"},
		{`null`, "fleet"},
		{`{` + ok + `, "clusters": "g"}`, "fleet.clusters"},
		{`{"capacity": 300, "fallback_capacity": 20}`, "fleet.cluster"},
		{`{"cluster": "", "capacity": 300, "fallback_capacity": 20}`, "fleet.cluster"},
		{`{"cluster": 1, "capacity": 300, "fallback_capacity": 20}`, "fleet.cluster"},
		{`{"cluster": "g", "fallback_capacity": 20}`, "fleet.capacity"},
		{`{"cluster": "g", "capacity": 50, "fallback_capacity": 20}`, "fleet.capacity"},
		{`{"cluster": "g", "capacity": 300}`, "fleet.fallback_capacity"},
		{`{"cluster": "g", "capacity": 300, "fallback_capacity": 101}`, "fleet.fallback_capacity"},
		{`{` + ok + `, "sync_interval": "3s"}`, "fleet.sync_interval"},
		{`{` + ok + `, "sync_interval": "10ms"}`, "fleet.sync_interval"},
		{`{` + ok + `, "sync_interval": 5}`, "fleet.sync_interval"},
		{`{` + ok + `, "timeout": "1s"}`, "fleet.timeout"},
		{`{` + ok + `, "timeout": "soon"}`, "fleet.timeout"},
	}
	for _, tc := range tests {
		_, err := ParseConfig([]byte(`{"capacity": 100, "cycle": "10s", "fleet": ` + tc.fleet + `}`))
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+": ") {
			t.Errorf("fleet %s: got %v, want an error on %s", tc.fleet, err, tc.field)
		}
	}
	// The bounds are the parser's, in the contract's words, not the
	// engine's; and a cycle too short for any sync_interval, its default
	// included, is the cycle's error.
	for _, tc := range []struct{ cfg, want string }{
		{`{"capacity": 100, "cycle": "10s", "fleet": {"cluster": "g", "capacity": 50, "fallback_capacity": 20}}`,
			"fleet.capacity: must be an integer in [100, 1099511627776], got 50"},
		{`{"capacity": 100, "cycle": "10s", "fleet": {"cluster": "g", "capacity": 300, "fallback_capacity": 101}}`,
			"fleet.fallback_capacity: must be an integer in [0, 100], got 101"},
		{`{"capacity": 100, "cycle": "10s", "fleet": {"cluster": "g", "capacity": 300, "fallback_capacity": 20, "sync_interval": "10ms"}}`,
			"fleet.sync_interval: must be in [50ms, 2.5s], got 10ms"},
		{`{"capacity": 100, "cycle": "100ms", "fleet": {"cluster": "g", "capacity": 300, "fallback_capacity": 20}}`,
			"cycle: must be at least 200ms with fleet (fleet.sync_interval is in [50ms, cycle/4]), got 100ms"},
	} {
		if _, err := ParseConfig([]byte(tc.cfg)); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := ParseConfig([]byte(`{"capacity": 100, "cycle": "200ms", "fleet": {"cluster": "g", "capacity": 300, "fallback_capacity": 20}}`)); err != nil {
		t.Errorf("fleet with a 200ms cycle, sync_interval's default: %v", err)
	}
	// In the limits form the field is named with its limit.
	_, err := ParseSettings([]byte(`{"cycle": "10s", "capacity": 100, "limits": [
		{"name": "api", "fleet": {"cluster": "g", "capacity": 300}}]}`))
	if err == nil || !strings.HasPrefix(err.Error(), "limits[0].fleet.fallback_capacity: ") {
		t.Errorf("limits form: %v", err)
	}
}

func TestLeaseRequestIsGetRateLimitsJSON(t *testing.T) {
	call := engine.LeaseCall{Hits: []engine.LeaseHit{
		{Key: `borrowcycle/a"b/7`, Hits: 40, Limit: 300, Duration: 21 * time.Second},
		{Key: "borrowcycle/a/7", Hits: -5, Limit: 300, Duration: 21 * time.Second},
	}}
	var doc struct {
		Requests []struct {
			Name      string `json:"name"`
			UniqueKey string `json:"unique_key"`
			Hits      int64  `json:"hits"`
			Limit     int64  `json:"limit"`
			Duration  int64  `json:"duration"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(appendLeaseRequest(nil, call), &doc); err != nil {
		t.Fatal(err)
	}
	r := doc.Requests
	if len(r) != 2 || r[0].Name != "borrowcycle" || r[0].UniqueKey != `borrowcycle/a"b/7` || r[0].Hits != 40 ||
		r[0].Limit != 300 || r[0].Duration != 21000 || r[1].Hits != -5 {
		t.Errorf("request %+v", r)
	}
}

func TestFleetRetryIsOnceAndNeverGivesBackTwice(t *testing.T) {
	call := engine.LeaseCall{ID: 3, Hits: []engine.LeaseHit{
		{Window: 7, Demand: true, Key: "k/7/demand", Hits: 9, Limit: 1 << 40},
		{Window: 7, Key: "k/7", Hits: -5, Limit: 300},
		{Window: 8, Key: "k/8", Hits: 40, Limit: 300},
	}}
	c := FleetCall{Limit: 1, Cluster: "gubernator", Timeout: time.Second, call: call}
	for _, status := range []int{200, 404, 429} {
		if _, ok := c.Retry(status); ok {
			t.Errorf("status %d retried: an answer is not retried", status)
		}
	}
	for _, status := range []int{0, 502, 503, 504} {
		r, ok := c.Retry(status)
		if !ok {
			t.Fatalf("status %d not retried", status)
		}
		if len(r.call.Hits) != 2 || r.call.Hits[0] != call.Hits[0] || r.call.Hits[1] != call.Hits[2] || r.call.ID != 3 ||
			r.Limit != 1 || r.Cluster != "gubernator" || string(r.Body) != string(appendLeaseRequest(nil, r.call)) {
			t.Errorf("status %d: retry %+v, want the same call without its give-back", status, r)
		}
		if _, again := r.Retry(status); again {
			t.Errorf("status %d: a retry was retried", status)
		}
	}
	onlyGiveBack := FleetCall{call: engine.LeaseCall{Hits: []engine.LeaseHit{{Hits: -5}}}}
	if _, ok := onlyGiveBack.Retry(0); ok {
		t.Error("a call of give-backs only was retried with nothing in it")
	}
}

func TestParseLeaseReplies(t *testing.T) {
	// The first answer is what Gubernator's gateway (v2.13.0) wrote in a
	// by-hand run; the others are the garbage a broken cluster may send.
	good := `{"responses":[{"status":"UNDER_LIMIT", "limit":"100", "remaining":"70", "reset_time":"1795445237675", "error":"", "metadata":{"owner":"127.0.0.1:19052"}},
		{"status":"OVER_LIMIT", "limit":"100", "remaining":70, "error":""}]}`
	got, err := ParseLeaseReplies([]byte(good), 2)
	if err != nil || len(got) != 2 || got[0] != (engine.LeaseReply{Remaining: 70, Reset: 1795445237675}) || got[1] != (engine.LeaseReply{Over: true, Remaining: 70}) {
		t.Fatalf("good answer: %+v, %v", got, err)
	}
	bad := []string{
		``,
		`garbage`,
		`{"responses":[]}`,
		`{"responses":[{"status":"UNDER_LIMIT","remaining":"1"},{"status":"UNDER_LIMIT","remaining":"1"},{"status":"UNDER_LIMIT","remaining":"1"}]}`,
		`{"responses":[{"status":"UNDER_LIMIT","limit":"0","remaining":"0","error":"Error while fetching rate limit 'x' from peer"},{"status":"UNDER_LIMIT","remaining":"1"}]}`,
		`{"responses":[{"status":"MAYBE","remaining":"1"},{"status":"UNDER_LIMIT","remaining":"1"}]}`,
		`{"responses":[{"status":"UNDER_LIMIT","remaining":"-3"},{"status":"UNDER_LIMIT","remaining":"1"}]}`,
		`{"responses":[{"status":"UNDER_LIMIT"},{"status":"UNDER_LIMIT","remaining":"1"}]}`,
		`{"responses":"no"}`,
		`{"responses":[{"status":"UNDER_LIMIT","remaining":"1","reset_time":"soon"},{"status":"UNDER_LIMIT","remaining":"1"}]}`,
		`{"responses":[{"status":"UNDER_LIMIT","remaining":"1","reset_time":"-5"},{"status":"UNDER_LIMIT","remaining":"1"}]}`,
		`{"responses":[{"status":"UNDER_LIMIT","remaining":"1"},` + strings.Repeat(" ", MaxFleetReply) + `]}`,
	}
	for _, b := range bad {
		if got, err := ParseLeaseReplies([]byte(b), 2); err == nil {
			t.Errorf("%.80q: accepted as %+v", b, got)
		}
	}
}

func FuzzParseLeaseReplies(f *testing.F) {
	f.Add([]byte(`{"responses":[{"status":"UNDER_LIMIT","remaining":"70","error":""}]}`), 1)
	f.Add([]byte(`{"responses":[{"status":"OVER_LIMIT","remaining":70}]}`), 1)
	f.Add([]byte(`{`), 2)
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < 0 || n > 8 {
			return
		}
		got, err := ParseLeaseReplies(body, n)
		if err == nil && len(got) != n {
			t.Fatalf("%d replies for %d requests", len(got), n)
		}
		for _, r := range got {
			if r.Remaining < 0 || r.Remaining > engine.MaxCapacity {
				t.Fatalf("remaining %d accepted", r.Remaining)
			}
		}
	})
}

// TestFleetRefusesCaps: a cap would hold per Envoy, not across the fleet.
func TestFleetRefusesCaps(t *testing.T) {
	_, err := ParseConfig([]byte(`{"capacity": 100, "cycle": "10s", "caps": {"free": 5},
		"fleet": {"cluster": "gubernator", "capacity": 300, "fallback_capacity": 20}}`))
	if want := "caps: not supported with fleet: a cap would hold per Envoy, not across the fleet"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}
