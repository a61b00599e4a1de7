package filter

import (
	"testing"
	"time"
)

// The benchmarks run with -benchmem (make bench): matching and the
// access-log record must report 0 allocs/op, whatever the request.

func BenchmarkMatch(b *testing.B) {
	f, _ := mustFilter(b, several)
	// Requests are converted to the interface once, as the host's
	// field-less reader is: a slice in an interface would allocate.
	reqs := []Request{
		headers{{":path", "/search?q=borrow"}, {":method", "GET"}, {"x-tenant", "t1"}},
		headers{{":path", "/export/all"}, {":method", "POST"}, {"x-tenant", "t1"}},
		headers{{":path", "/orders"}, {":method", "PUT"}, {"x-env", "prod"}, {"x-tenant", "t1"}},
		headers{{":path", "/healthz"}, {":method", "GET"}}, // no limit: every condition tried
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f.Match(reqs[i%len(reqs)])
	}
}

// BenchmarkDecide is one admitted request, with the one-limit form and with
// the request matched by the last of four limits (the difference is what
// matching adds), and with two windows, admitted by both or refused by
// the second.
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct {
		name, config string
		req          headers
	}{
		{"one_limit", `{"capacity": 1000000000, "cycle": "1h"}`, headers{{":path", "/orders"}, {":method", "PUT"}, {"x-client-id", "t1"}}},
		{"fourth_of_four", `{"cycle": "1h", "capacity": 1000000000, "limits": [
			{"name": "health", "match": {"path_exact": "/healthz", "headers": {"x-probe": "*"}}},
			{"name": "search", "match": {"path_prefix": "/search", "methods": ["GET", "HEAD"]}},
			{"name": "export", "cost": 5, "match": {"path_prefix": "/export"}},
			{"name": "writes", "match": {"methods": ["POST", "PUT"], "headers": {"x-env": "prod"}}}]}`,
			headers{{":path", "/orders"}, {":method", "PUT"}, {"x-env", "prod"}, {"x-client-id", "t1"}}},
		{"two_windows", `{"windows": [{"capacity": 1000000000, "cycle": "1h"}, {"capacity": 1000000000, "cycle": "1m"}]}`,
			headers{{"x-client-id", "t1"}}},
		// Every request after the first is admitted by the hour and
		// refused by the millisecond (the clock stands still), whose
		// refusal gives the hour's unit back: the refund path.
		{"two_windows_refused_by_the_second", `{"windows": [{"capacity": 1000000000, "cycle": "1h"}, {"capacity": 1, "cycle": "1ms"}]}`,
			headers{{"x-client-id", "t1"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, clock := mustFilter(b, c.config)
			clock.Advance(time.Second)
			var req Request = c.req
			if o := f.Decide(req); !o.Decision.Allowed {
				b.Fatalf("not admitted: %+v", o)
			}
			b.ReportAllocs()
			for b.Loop() {
				f.Decide(req)
			}
		})
	}
}

func BenchmarkAccessLogRecord(b *testing.B) {
	f, clock := mustFilter(b, `{"capacity": 1000000000, "cycle": "1h", "log_client_id": true}`)
	clock.Advance(time.Second)
	o := f.Decide(headers{{"x-client-id", "tenant-42"}})
	b.ReportAllocs()
	for b.Loop() {
		f.AccessLog(o)
	}
}
