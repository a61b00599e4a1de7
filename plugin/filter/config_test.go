package filter

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// base is the smallest valid configuration; cases add one field to it.
const base = `"capacity": 100, "cycle": "10s"`

func withField(field string) string { return `{` + base + `, ` + field + `}` }

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{` + base + `}`))
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Defaults(100, 10*time.Second)
	want.KeyPrefix = "borrowcycle/default"
	if !reflect.DeepEqual(cfg.Engine, want) {
		t.Errorf("engine config = %+v, want %+v", cfg.Engine, want)
	}
	if cfg.ClientHeader != "x-client-id" || cfg.Passthrough || !cfg.HeadersOnAllowed ||
		cfg.RateLimitHeaders != StyleXRateLimit || cfg.StatusCode != 429 || cfg.MaxClientIDBytes != 256 ||
		cfg.Name != "default" || cfg.DebugHeaders {
		t.Errorf("plugin defaults wrong: %+v", cfg)
	}
}

func TestParseConfigEveryField(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{
		"capacity": 1000, "cycle": "1m", "reservation": 0.25, "client_header": "X-Tenant",
		"mode": "passthrough", "max_clients": 100000, "idle_cycles": 7, "min_cycle": "1m", "window_offset": "15s",
		"failure_mode_deny": true, "rate_limit_headers": "ietf", "headers_on_allowed": false,
		"status_code": 503, "max_client_id_bytes": 4096, "name": "api_v2", "debug_headers": true, "retry_after_jitter": "2s"}`))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Engine
	if e.Capacity != 1000 || e.Cycle != time.Minute || e.Reservation != 0.25 || e.MaxClients != 100000 ||
		e.IdleCycles != 7 || e.MinCycle != time.Minute || e.WindowOffset != 15*time.Second || !e.FailureModeDeny || !e.Passthrough ||
		e.KeyPrefix != "borrowcycle/api_v2" {
		t.Errorf("engine config = %+v", e)
	}
	if cfg.ClientHeader != "x-tenant" || !cfg.Passthrough || cfg.HeadersOnAllowed || cfg.RateLimitHeaders != StyleIETF ||
		cfg.StatusCode != 503 || cfg.MaxClientIDBytes != 4096 || cfg.Name != "api_v2" || !cfg.DebugHeaders || cfg.RetryAfterJitter != 2*time.Second {
		t.Errorf("plugin config = %+v", cfg)
	}
}

func TestParseConfigBoundsAccepted(t *testing.T) {
	for _, field := range []string{
		`"reservation": 0`, `"reservation": 1`, `"max_clients": 1`, `"idle_cycles": 1`,
		`"min_cycle": "1ns"`, `"min_cycle": "10s"`, `"window_offset": "0s"`, `"window_offset": "9.999s"`, `"retry_after_jitter": "0s"`, `"retry_after_jitter": "10s"`, `"max_wait": "0s"`, `"max_wait": "10s"`, `"max_waiting": 1`, `"max_waiting": 100000`, `"status_code": 400`, `"status_code": 599`,
		`"max_client_id_bytes": 1`, `"rate_limit_headers": "none"`, `"mode": "enforce"`,
		`"name": "` + strings.Repeat("z", 64) + `"`, `"client_header": "x_id.v2~"`,
	} {
		if _, err := ParseConfig([]byte(withField(field))); err != nil {
			t.Errorf("%s: %v", field, err)
		}
	}
	// A long cycle's min_cycle is a minute at most: newcomers that wait
	// for a re-plan wait no longer.
	if cfg, err := ParseConfig([]byte(`{"capacity": 1099511627776, "cycle": "168h"}`)); err != nil || cfg.Engine.MinCycle != time.Minute {
		t.Errorf("largest capacity and cycle: %+v, %v", cfg.Engine, err)
	}
	if cfg, err := ParseConfig([]byte(`{"capacity": 10, "cycle": "5m"}`)); err != nil || cfg.Engine.MinCycle != 30*time.Second {
		t.Errorf("5m cycle: min_cycle %v, %v", cfg.Engine.MinCycle, err)
	}
	// The shortest cycle gets a tenth of it as min_cycle.
	if cfg, err := ParseConfig([]byte(`{"capacity": 1, "cycle": "1ms"}`)); err != nil || cfg.Engine.MinCycle != 100*time.Microsecond {
		t.Errorf("1ms cycle: min_cycle %v, %v", cfg.Engine.MinCycle, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := []struct {
		config string
		want   string // the whole error text: field, then reason
	}{
		// Document-level errors.
		{``, `capacity: required`},
		{`  `, `capacity: required`},
		{`{}`, `capacity: required`},
		{`null`, `json: the configuration must be a JSON object, got null`},
		{`[1]`, `json: the configuration must be a JSON object, got an array`},
		{`"x"`, `json: the configuration must be a JSON object, got a string`},
		{`7`, `json: the configuration must be a JSON object, got a number`},
		{`{"capacity": 1,`, `json: malformed at byte 15: unexpected end of JSON input`},
		{`{"capacity": 1 "cycle": "1s"}`, `json: malformed at byte 16: invalid character '"' after object key:value pair`},
		{`{` + base + `} {}`, `json: malformed at byte 35: invalid character '{' after top-level value`},
		{`[1`, `json: malformed at byte 2: unexpected end of JSON input`},
		{withField(`"burst": 1, "alpha": 2`), `alpha: unknown field`},
		{withField(`"bursty": 1`), `bursty: unknown field`},
		{withField(`"Capacity": 1`), `Capacity: unknown field`},
		// capacity
		{`{"cycle": "1s"}`, `capacity: required`},
		{`{"capacity": null, "cycle": "1s"}`, `capacity: must be a number, got null`},
		{`{"capacity": "5", "cycle": "1s"}`, `capacity: must be a number, got a string`},
		{`{"capacity": 0, "cycle": "1s"}`, `capacity: must be an integer in [1, 1099511627776], got 0`},
		{`{"capacity": -3, "cycle": "1s"}`, `capacity: must be an integer in [1, 1099511627776], got -3`},
		{`{"capacity": 1.5, "cycle": "1s"}`, `capacity: must be an integer in [1, 1099511627776], got 1.5`},
		{`{"capacity": 1e3, "cycle": "1s"}`, `capacity: must be an integer in [1, 1099511627776], got 1e3`},
		{`{"capacity": 1099511627777, "cycle": "1s"}`, `capacity: must be an integer in [1, 1099511627776], got 1099511627777`},
		{`{"capacity": 99999999999999999999, "cycle": "1s"}`, `capacity: must be an integer in [1, 1099511627776], got 99999999999999999999`},
		// cycle
		{`{"capacity": 1}`, `cycle: required`},
		{`{"capacity": 1, "cycle": 10}`, `cycle: must be a string, got a number`},
		{`{"capacity": 1, "cycle": "abc"}`, `cycle: invalid duration "abc"`},
		{`{"capacity": 1, "cycle": "10"}`, `cycle: invalid duration "10"`},
		{`{"capacity": 1, "cycle": "0s"}`, `cycle: must be in [1ms, 168h0m0s], got 0s`},
		{`{"capacity": 1, "cycle": "-1s"}`, `cycle: must be in [1ms, 168h0m0s], got -1s`},
		{`{"capacity": 1, "cycle": "999µs"}`, `cycle: must be in [1ms, 168h0m0s], got 999µs`},
		{`{"capacity": 1, "cycle": "200ns"}`, `cycle: must be in [1ms, 168h0m0s], got 200ns`},
		{`{"capacity": 1, "cycle": "168h0m1s"}`, `cycle: must be in [1ms, 168h0m0s], got 168h0m1s`},
		// The others, each alone on a valid base.
		{withField(`"reservation": -0.1`), `reservation: must be a number in [0, 1], got -0.1`},
		{withField(`"reservation": 1.01`), `reservation: must be a number in [0, 1], got 1.01`},
		{withField(`"reservation": "0.5"`), `reservation: must be a number, got a string`},
		{withField(`"client_header": ""`), `client_header: must be an HTTP header name of 1 to 256 token characters, got ""`},
		{withField(`"client_header": "x client"`), `client_header: must be an HTTP header name of 1 to 256 token characters, got "x client"`},
		{withField(`"client_header": ":authority"`), `client_header: must be an HTTP header name of 1 to 256 token characters, got ":authority"`},
		{withField(`"client_header": 5`), `client_header: must be a string, got a number`},
		{withField(`"max_ids_per_peer": 17`), `max_ids_per_peer: must be an integer in [0, 16], got 17`},
		{withField(`"max_ids_per_peer": -1`), `max_ids_per_peer: must be an integer in [0, 16], got -1`},
		{withField(`"peer": "header"`), `peer: must be one of "source_address", "peer_principal", got "header"`},
		{withField(`"mode": "shadow"`), `mode: must be one of "enforce", "passthrough", got "shadow"`},
		{withField(`"mode": "Enforce"`), `mode: must be one of "enforce", "passthrough", got "Enforce"`},
		{withField(`"mode": true`), `mode: must be a string, got a boolean`},
		{withField(`"max_clients": 0`), `max_clients: must be an integer in [1, 100000], got 0`},
		{withField(`"max_clients": 100001`), `max_clients: must be an integer in [1, 100000], got 100001`},
		{withField(`"max_clients": [1]`), `max_clients: must be a number, got an array`},
		{withField(`"idle_cycles": 0`), `idle_cycles: must be an integer in [1, 65536], got 0`},
		{withField(`"idle_cycles": 65537`), `idle_cycles: must be an integer in [1, 65536], got 65537`},
		{withField(`"min_cycle": "0s"`), `min_cycle: must be in (0s, 10s], got 0s`},
		{withField(`"min_cycle": "11s"`), `min_cycle: must be in (0s, 10s], got 11s`},
		{withField(`"min_cycle": "soon"`), `min_cycle: invalid duration "soon"`},
		{withField(`"window_offset": "10s"`), `window_offset: must be in [0s, 10s), got 10s`},
		{withField(`"window_offset": "-1s"`), `window_offset: must be in [0s, 10s), got -1s`},
		{withField(`"window_offset": 3`), `window_offset: must be a string, got a number`},
		{withField(`"retry_after_jitter": "11s"`), `retry_after_jitter: must be in [0s, 10s], got 11s`},
		{withField(`"retry_after_jitter": "-1s"`), `retry_after_jitter: must be in [0s, 10s], got -1s`},
		{withField(`"max_wait": "11s"`), `max_wait: must be in [0s, 10s], got 11s`},
		{`{"capacity": 10, "cycle": "1h", "max_wait": "61s"}`, `max_wait: must be in [0s, 1m0s], got 1m1s`},
		{withField(`"max_waiting": 0`), `max_waiting: must be an integer in [1, 100000], got 0`},
		{withField(`"failure_mode_deny": "true"`), `failure_mode_deny: must be a boolean, got a string`},
		{withField(`"failure_mode_deny": 1`), `failure_mode_deny: must be a boolean, got a number`},
		{withField(`"rate_limit_headers": "draft-7"`), `rate_limit_headers: must be one of "x-ratelimit", "ietf", "none", got "draft-7"`},
		{withField(`"headers_on_allowed": null`), `headers_on_allowed: must be a boolean, got null`},
		{withField(`"status_code": 399`), `status_code: must be an integer in [400, 599], got 399`},
		{withField(`"status_code": 600`), `status_code: must be an integer in [400, 599], got 600`},
		{withField(`"status_code": "429"`), `status_code: must be a number, got a string`},
		{withField(`"max_client_id_bytes": 0`), `max_client_id_bytes: must be an integer in [1, 4096], got 0`},
		{withField(`"max_client_id_bytes": 4097`), `max_client_id_bytes: must be an integer in [1, 4096], got 4097`},
		{withField(`"name": ""`), `name: must match [a-z0-9_]{1,64}, got ""`},
		{withField(`"name": "Api"`), `name: must match [a-z0-9_]{1,64}, got "Api"`},
		{withField(`"name": "a.b"`), `name: must match [a-z0-9_]{1,64}, got "a.b"`},
		{withField(`"name": "` + strings.Repeat("z", 65) + `"`), `name: must match [a-z0-9_]{1,64}, got "` + strings.Repeat("z", 65) + `"`},
		{withField(`"debug_headers": {}`), `debug_headers: must be a boolean, got an object`},
		// Several errors: the first field in the contract's order wins.
		{`{"capacity": 1, "cycle": "1s", "status_code": 1, "reservation": 9}`, `reservation: must be a number in [0, 1], got 9`},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(c.config))
		if err == nil {
			t.Errorf("%s: no error, want %q", c.config, c.want)
			continue
		}
		var ce *configError
		if !errors.As(err, &ce) {
			t.Errorf("%s: error %T is not a configError", c.config, err)
		}
		if err.Error() != c.want {
			t.Errorf("%s:\n got  %q\n want %q", c.config, err.Error(), c.want)
		}
	}
}

func TestFromEngineErrorMapsFieldNames(t *testing.T) {
	err := fromEngineError(&engine.FieldError{Field: "key_prefix", Reason: "too long"}, func(f string) string { return f })
	if err.Error() != "name: too long" {
		t.Errorf("key_prefix error = %q, want it reported as name", err)
	}
	err = fromEngineError(&engine.FieldError{Field: "min_cycle", Reason: "bad"}, func(f string) string { return "limits[1]." + f })
	if err.Error() != "limits[1].min_cycle: bad" {
		t.Errorf("min_cycle error = %q", err)
	}
}
