package main

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// statusCounts are Envoy's ingress response-class counters.
type statusCounts struct {
	total              uint64
	c1, c2, c3, c4, c5 uint64
}

func (s statusCounts) minus(o statusCounts) statusCounts {
	return statusCounts{s.total - o.total, s.c1 - o.c1, s.c2 - o.c2, s.c3 - o.c3, s.c4 - o.c4, s.c5 - o.c5}
}

// ofClass returns the count of responses in status's class (2 for 200).
func (s statusCounts) ofClass(status int) uint64 {
	return [...]uint64{0, s.c1, s.c2, s.c3, s.c4, s.c5}[status/100]
}

// answered is the number of responses sent. It can be below total: a
// request still in flight when wrk closes its connections is counted in
// total but never answered.
func (s statusCounts) answered() uint64 { return s.c1 + s.c2 + s.c3 + s.c4 + s.c5 }

func (s statusCounts) String() string {
	return fmt.Sprintf("%d responses: 1xx %d, 2xx %d, 3xx %d, 4xx %d, 5xx %d", s.total, s.c1, s.c2, s.c3, s.c4, s.c5)
}

// ingressStatuses reads the ingress connection manager's counters from the
// admin interface. Reading them costs Envoy some CPU, so it is done outside
// the measured interval.
func ingressStatuses(client *http.Client, adminURL string) (statusCounts, error) {
	resp, err := client.Get(adminURL + `/stats?filter=^http\.ingress\.downstream_rq_`)
	if err != nil {
		return statusCounts{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return statusCounts{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return statusCounts{}, fmt.Errorf("admin /stats: %s", resp.Status)
	}
	return parseIngressStats(body)
}

func parseIngressStats(body []byte) (statusCounts, error) {
	var s statusCounts
	fields := map[string]*uint64{
		"total": &s.total, "1xx": &s.c1, "2xx": &s.c2, "3xx": &s.c3, "4xx": &s.c4, "5xx": &s.c5,
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ": ")
		suffix, found := strings.CutPrefix(name, "http.ingress.downstream_rq_")
		if !ok || !found {
			continue
		}
		if p, ok := fields[suffix]; ok {
			n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
			if err != nil {
				return s, fmt.Errorf("stat %s: %w", name, err)
			}
			*p = n
			seen++
		}
	}
	if seen != len(fields) {
		return s, fmt.Errorf("admin /stats gave %d of the %d ingress response counters", seen, len(fields))
	}
	return s, nil
}

//go:embed clients.lua
var clientsLua []byte

// wrkResult is what clients.lua's done hook reports.
type wrkResult struct {
	requests                      uint64
	duration                      time.Duration
	connect, read, write, timeout uint64
	non2xx3xx                     uint64
	p50, p99, p999                time.Duration
	cpu                           time.Duration // wrk's own user+system time (rusage)
	wall                          time.Duration // wrk's run, start to exit
}

func (r wrkResult) socketErrors() uint64 { return r.connect + r.read + r.write + r.timeout }

// wrkRun is one invocation of wrk: one thread (one core's worth of load
// generator) holding connections open against url for seconds.
type wrkRun struct {
	wrk, script string
	cpu         int // -1: not pinned
	connections int
	seconds     int
	url         string
	clients     []string // clients.lua's arguments after the header (variant.loadArgs)
}

func (w wrkRun) command() *exec.Cmd {
	args := []string{"-t1", "-c" + strconv.Itoa(w.connections), "-d" + strconv.Itoa(w.seconds) + "s",
		"--timeout", "5s", "-s", w.script, w.url + "/", "--", clientHeader}
	args = append(args, w.clients...)
	if w.cpu < 0 {
		return exec.Command(w.wrk, args...)
	}
	return exec.Command("taskset", append([]string{"-c", strconv.Itoa(w.cpu), w.wrk}, args...)...)
}

func (w wrkRun) run() (wrkResult, error) {
	var out bytes.Buffer
	cmd := w.command()
	cmd.Stdout = &out
	cmd.Stderr = &out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return wrkResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	r, err := parseWrk(out.String())
	if err != nil {
		return r, fmt.Errorf("%w\n%s", err, out.String())
	}
	// taskset execs wrk, so the child's rusage is wrk's.
	r.wall = time.Since(t0)
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

const wrkResultPrefix = "benchenvoy: "

func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, wrkResultPrefix)
		if !ok {
			continue
		}
		vals := map[string]uint64{}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return r, fmt.Errorf("wrk result %q: %w", kv, err)
			}
			vals[k] = n
		}
		want := []string{"requests", "duration_us", "connect", "read", "write", "timeout", "non2xx3xx", "p50_us", "p99_us", "p999_us"}
		for _, k := range want {
			if _, ok := vals[k]; !ok {
				return r, fmt.Errorf("wrk result line lacks %s: %q", k, line)
			}
		}
		us := func(k string) time.Duration { return time.Duration(vals[k]) * time.Microsecond }
		return wrkResult{
			requests: vals["requests"], duration: us("duration_us"),
			connect: vals["connect"], read: vals["read"], write: vals["write"], timeout: vals["timeout"],
			non2xx3xx: vals["non2xx3xx"], p50: us("p50_us"), p99: us("p99_us"), p999: us("p999_us"),
		}, nil
	}
	return r, errors.New("wrk printed no result line (is clients.lua's done hook running?)")
}
