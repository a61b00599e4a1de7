package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// Ingress routes (-route).
const (
	RouteDirect = "direct"
	RouteProxy  = "proxy"
)

// clientHeader is the header the load and every filter read the client from
// (the plugin's default client_header).
const clientHeader = "x-client-id"

// settleTimeout bounds how long a variant may take to answer every client
// as expected before a measurement: newcomers wait for one re-plan
// (min_cycle, 1 s in these configurations). settlePause, a little over
// min_cycle, separates the passes of settle.
const (
	settleTimeout = 30 * time.Second
	settlePause   = 1100 * time.Millisecond
)

// Options configure a run.
type Options struct {
	Envoy, Wasm, Noop, Wrk string
	Rounds                 int
	Duration, Warmup       time.Duration
	Connections, Clients   int
	Route                  string
	Dir                    string
	// Only, when set, measures just these variants besides the baselines
	// the table divides by (noop, local_ratelimit, borrowcycle).
	Only []string
	// Profile samples each variant's Envoy with perf after the rounds
	// (profile.go).
	Profile bool
	// Scale adds the scale variants (variants.go).
	Scale    bool
	Progress io.Writer // progress lines; the table is the caller's
}

func (o Options) clientIDs() []string {
	ids := make([]string, o.Clients)
	for i := range ids {
		ids[i] = fmt.Sprintf("client-%02d", i)
	}
	return ids
}

// wholeSeconds converts a duration for wrk, which takes whole seconds.
func wholeSeconds(name string, d time.Duration, min int) (int, error) {
	s := int(d / time.Second)
	if d%time.Second != 0 || s < min {
		return 0, fmt.Errorf("-%s %s: wrk needs a whole number of seconds >= %d", name, d, min)
	}
	return s, nil
}

func (o *Options) check() error {
	var errs []error
	if o.Envoy == "" {
		errs = append(errs, errors.New("no Envoy: set -envoy or BORROWCYCLE_ENVOY (make bench-envoy does)"))
	}
	if o.Wasm == "" {
		errs = append(errs, errors.New("-wasm is required (make build writes build/borrowcycle.wasm)"))
	} else if o.Noop == "" {
		o.Noop = filepath.Join(filepath.Dir(o.Wasm), "noop.wasm")
	}
	for _, f := range []string{o.Envoy, o.Wasm, o.Noop} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("%v (make build and make envoy provide it)", err))
		}
	}
	if _, err := exec.LookPath(o.Wrk); err != nil {
		errs = append(errs, fmt.Errorf("load generator: %v (make bench-envoy installs wrk with scripts/getwrk.sh)", err))
	}
	if o.Rounds < 1 || o.Connections < 1 || o.Clients < 1 {
		errs = append(errs, errors.New("-rounds, -connections and -clients must be >= 1"))
	}
	if _, err := exec.LookPath("perf"); o.Profile && err != nil {
		errs = append(errs, fmt.Errorf("-profile: %v (Debian's linux-perf)", err))
	}
	if bad := unknownVariants(o.Only); len(bad) > 0 {
		errs = append(errs, fmt.Errorf("-only: no variant %s", strings.Join(bad, ", ")))
	}
	if o.Route != RouteDirect && o.Route != RouteProxy {
		errs = append(errs, fmt.Errorf("-route %q: want %s or %s", o.Route, RouteDirect, RouteProxy))
	}
	if _, err := wholeSeconds("duration", o.Duration, 1); err != nil {
		errs = append(errs, err)
	}
	if _, err := wholeSeconds("warmup", o.Warmup, 0); err != nil {
		errs = append(errs, err)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return errors.Join(errs...)
}

// placement says which CPU Envoy and wrk run on; -1 means not pinned.
type placement struct {
	envoyCPU, loadCPU int
	shared            bool // fewer than two CPUs: Envoy and wrk compete for one
}

// place pins Envoy to the first allowed CPU and wrk to the second. With a
// single CPU the two cannot be separated: the run goes on unpinned and the
// table says so, because req/s and latency then include the load
// generator's share of the CPU (Envoy's CPU per request does not).
func place() (placement, error) {
	cpus, err := allowedCPUs()
	if err != nil {
		return placement{}, err
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return placement{}, fmt.Errorf("taskset (util-linux) is needed to pin Envoy and wrk to separate CPUs: %v", err)
	}
	if len(cpus) < 2 {
		return placement{envoyCPU: -1, loadCPU: -1, shared: true}, nil
	}
	return placement{envoyCPU: cpus[0], loadCPU: cpus[1]}, nil
}

// sample is one variant's measurement in one round.
type sample struct {
	qps       float64       // wrk's completed requests / wrk's duration
	cpuPerReq time.Duration // Envoy CPU time / requests Envoy answered
	cpuShare  float64       // Envoy CPU time / wall time of the interval
	wrkShare  float64       // wrk's CPU time / its wall time
	steal     float64       // steal time of Envoy's CPU / wall time of the interval
	p50, p99  time.Duration
	p999      time.Duration
	statuses  statusCounts
	// honestSent and honestOK: the honest client's requests in the
	// interval, and those admitted (a flood row with honest set).
	honestSent, honestOK uint64
}

// instance is a running Envoy for one variant.
type instance struct {
	variant
	envoy  *envoyrun.Envoy
	pid    int
	honest *honest // its honest client, when the variant has one
}

// Results are a run's samples, one list per variant in table order.
type Results struct {
	Options   Options
	Placement placement
	EnvoyVer  string
	Variants  []variant
	Samples   [][]sample
	// PluginStats are the flood variants' plugin stats after the last
	// round (pluginStats), by variant name.
	PluginStats map[string]string
	// Profiles are the -profile splits, in table order (nil without it).
	Profiles []cpuSplit
}

// Run starts one Envoy per variant, warms each up, and measures them in
// interleaved rounds. Every Envoy it started is stopped before it returns.
func Run(o Options) (_ *Results, err error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	pl, err := place()
	if err != nil {
		return nil, err
	}
	if pl.shared {
		fmt.Fprintln(o.Progress, "benchenvoy: WARNING: only one CPU is available, so Envoy and wrk share it: req/s and latency include wrk's share; µs CPU/req is still Envoy's own")
	}
	if o.Dir == "" {
		dir, mkErr := os.MkdirTemp("", "benchenvoy-")
		if mkErr != nil {
			return nil, mkErr
		}
		o.Dir = dir
		// Runs after the Envoys are stopped (defers run last-in first-out).
		defer func() {
			if err == nil {
				os.RemoveAll(dir)
			} else {
				err = fmt.Errorf("%w\n(Envoy configs and logs kept in %s)", err, dir)
			}
		}()
	} else if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	script := filepath.Join(o.Dir, "clients.lua")
	if err := os.WriteFile(script, clientsLua, 0o644); err != nil {
		return nil, err
	}
	version, _ := exec.Command(o.Envoy, "--version").Output()
	res := &Results{Options: o, Placement: pl, EnvoyVer: strings.TrimSpace(string(version)), Variants: selected(variants(o), o.Only)}

	insts, err := startAll(o, pl, res.Variants)
	defer func() {
		for _, in := range insts {
			if in != nil {
				_ = in.envoy.Stop()
			}
		}
	}()
	if err != nil {
		return nil, err
	}

	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for _, in := range insts {
		if !in.withHonest {
			continue
		}
		fmt.Fprintf(o.Progress, "benchenvoy: %s: registering the honest client\n", in.name)
		if in.honest, err = startHonest(in); err != nil {
			return nil, err
		}
		defer in.honest.close()
	}
	load := func(in *instance, seconds int) wrkRun {
		return wrkRun{wrk: o.Wrk, script: script, cpu: pl.loadCPU, connections: o.Connections,
			seconds: seconds, url: in.envoy.URL, clients: in.loadArgs(o)}
	}
	warm, _ := wholeSeconds("warmup", o.Warmup, 0)
	if warm > 0 {
		for _, in := range insts {
			fmt.Fprintf(o.Progress, "benchenvoy: warm-up %s (%ds)\n", in.name, warm)
			if err := settle(client, in, o.clientIDs()); err != nil {
				return nil, err
			}
			w := load(in, warm)
			w.clients = in.warmArgs(o)
			if _, err := w.run(); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", in.name, err)
			}
			if err := register(o, in, load); err != nil {
				return nil, err
			}
		}
	}

	secs, _ := wholeSeconds("duration", o.Duration, 1)
	res.Samples = make([][]sample, len(insts))
	for r := 0; r < o.Rounds; r++ {
		for k := range insts {
			i := (k + r) % len(insts) // rotate who goes first
			in := insts[i]
			fmt.Fprintf(o.Progress, "benchenvoy: round %d/%d: %s (%ds)\n", r+1, o.Rounds, in.name, secs)
			s, err := measure(client, in, load(in, secs), o.clientIDs(), pl.envoyCPU)
			if err != nil {
				return nil, fmt.Errorf("round %d: %s: %w", r+1, in.name, err)
			}
			res.Samples[i] = append(res.Samples[i], s)
		}
	}
	if o.Profile {
		res.Profiles = make([]cpuSplit, len(insts))
		for i, in := range insts {
			fmt.Fprintf(o.Progress, "benchenvoy: profile %s (%ds)\n", in.name, secs)
			if err := settle(client, in, o.clientIDs()); err != nil {
				return nil, err
			}
			if res.Profiles[i], err = profileRun(in, load(in, secs), o.Dir); err != nil {
				return nil, fmt.Errorf("profile %s: %w", in.name, err)
			}
		}
	}
	res.PluginStats = map[string]string{}
	for _, in := range insts {
		if in.flood > 0 {
			if res.PluginStats[in.name], err = pluginStats(client, in.envoy.AdminURL); err != nil {
				return nil, fmt.Errorf("%s: %w", in.name, err)
			}
		}
	}
	return res, nil
}

// register goes on warming a known flood up, in loads of registerStep,
// until at most 1% of the answers over a whole rotation of its ids (one
// or more loads) are 429s (newcomers not yet counted), so that its row
// measures known clients however slow the machine is: at a few thousand
// requests per second, 100,000 ids take more than a minute to be asked
// twice each. It gives up after registerSteps loads and says so; the
// row's 429 column then shows it.
func register(o Options, in *instance, load func(*instance, int) wrkRun) error {
	if !in.known {
		return nil
	}
	var asked, refused uint64
	for i := 0; i < registerSteps; i++ {
		r, err := load(in, registerStep).run()
		if err != nil {
			return fmt.Errorf("%s: warm-up: %w", in.name, err)
		}
		asked, refused = asked+r.requests, refused+r.non2xx3xx
		if asked < uint64(in.flood) {
			continue // not every id asked yet
		}
		if refused*100 <= asked {
			return nil
		}
		fmt.Fprintf(o.Progress, "benchenvoy: warm-up %s: %d of %d answers were 429s, more\n", in.name, refused, asked)
		asked, refused = 0, 0
	}
	fmt.Fprintf(o.Progress, "benchenvoy: warm-up %s: still over 1%% 429s after %d more loads\n", in.name, registerSteps)
	return nil
}

const (
	registerStep  = 5 // seconds
	registerSteps = 36
)

// startAll starts every variant's Envoy, as many at a time as there are
// CPUs (each compiles its module on start-up: more at once on a small
// machine only makes every one of them miss its readiness deadline). It
// returns what it started even on error, for the caller to stop.
func startAll(o Options, pl placement, vs []variant) ([]*instance, error) {
	insts := make([]*instance, len(vs))
	errs := make([]error, len(vs))
	// Every wrapper is written before any Envoy is forked: a script still
	// open for writing in one goroutine while another forks cannot be
	// executed ("text file busy", golang/go#22315).
	for _, v := range vs {
		if err := writeWrapper(o, pl, v); err != nil {
			return insts, fmt.Errorf("%s: %w", v.name, err)
		}
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.NumCPU())
	for i, v := range vs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			fmt.Fprintf(o.Progress, "benchenvoy: starting Envoy for %s\n", v.name)
			insts[i], errs[i] = start(o, pl, v)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", v.name, errs[i])
			}
		}()
	}
	wg.Wait()
	return insts, errors.Join(errs...)
}

// start runs one Envoy on the shipped bootstrap changed for v, through the
// wrapper script writeWrapper wrote, which records its pid (the CPU counters are read from
// /proc/<pid>/stat) and pins it with taskset from its first instruction.
// Both the script's shell and taskset exec, so the pid is Envoy's.
func start(o Options, pl placement, v variant) (*instance, error) {
	b, err := envoyrun.DefaultBootstrap()
	if err != nil {
		return nil, err
	}
	if err := v.filter(b); err != nil {
		return nil, err
	}
	if o.Route == RouteDirect {
		if b, err = directResponse(b); err != nil {
			return nil, err
		}
	}
	pidFile, wrapper := wrapperFiles(o, v)
	e, err := envoyrun.Start(context.Background(), envoyrun.Options{
		Envoy: wrapper, Bootstrap: b, Concurrency: 1, Dir: o.Dir, Name: v.name,
	})
	if err != nil {
		return nil, err
	}
	in := &instance{variant: v, envoy: e}
	raw, err := os.ReadFile(pidFile)
	if err == nil {
		in.pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
	}
	if err == nil {
		err = checkIsEnvoy(in.pid, o.Envoy)
	}
	if err == nil && pl.envoyCPU >= 0 {
		err = checkPinned(in.pid, pl.envoyCPU)
	}
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("Envoy's pid: %w", err)
	}
	return in, nil
}

// wrapperFiles are v's pid file and wrapper script (see start).
func wrapperFiles(o Options, v variant) (pidFile, wrapper string) {
	return filepath.Join(o.Dir, v.name+".pid"), filepath.Join(o.Dir, v.name+".sh")
}

// writeWrapper writes v's wrapper script: it records its pid and execs
// Envoy, pinned with taskset when pl pins it.
func writeWrapper(o Options, pl placement, v variant) error {
	pidFile, wrapper := wrapperFiles(o, v)
	pin := ""
	if pl.envoyCPU >= 0 {
		pin = "taskset -c " + strconv.Itoa(pl.envoyCPU) + " "
	}
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s\nexec %s%s \"$@\"\n", shellQuote(pidFile), pin, shellQuote(o.Envoy))
	return os.WriteFile(wrapper, []byte(script), 0o755)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// directResponse rewrites the ingress route of the shipped bootstrap to
// answer by itself, with the same status and body size class as the demo
// upstream, so nothing but the filter chain sits on the request path.
func directResponse(b *envoyrun.Bootstrap) (*envoyrun.Bootstrap, error) {
	raw, err := b.Bytes()
	if err != nil {
		return nil, err
	}
	var root map[string]any
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	route, err := ingressRoute(root)
	if err != nil {
		return nil, fmt.Errorf("direct_response route: %w", err)
	}
	delete(route, "route")
	route["direct_response"] = map[string]any{"status": 200, "body": map[string]any{"inline_string": "hello from benchenvoy\n"}}
	out, err := yaml.Marshal(root)
	if err != nil {
		return nil, err
	}
	return envoyrun.ParseBootstrap(out)
}

// ingressRoute finds the first route of the ingress listener's first
// virtual host in a generic bootstrap.
func ingressRoute(root map[string]any) (map[string]any, error) {
	sr, err := walk(root, "static_resources")
	if err != nil {
		return nil, err
	}
	listeners, _ := sr["listeners"].([]any)
	for _, l := range listeners {
		lm, ok := l.(map[string]any)
		if !ok || lm["name"] != envoyrun.IngressListener {
			continue
		}
		return walk(lm, "filter_chains[0]", "filters[0]", "typed_config", "route_config", "virtual_hosts[0]", "routes[0]")
	}
	return nil, fmt.Errorf("no listener named %q", envoyrun.IngressListener)
}

// walk follows keys down a generic YAML tree, each a map key or, with a
// "[0]" suffix, the first element of the list under that key, and returns
// the map it ends at, or an error naming the first step that is missing.
func walk(m map[string]any, keys ...string) (map[string]any, error) {
	for _, k := range keys {
		name, first := strings.CutSuffix(k, "[0]")
		v := m[name]
		if first {
			l, ok := v.([]any)
			if !ok || len(l) == 0 {
				return nil, fmt.Errorf("%s is not a non-empty list", name)
			}
			v = l[0]
		}
		next, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is %T, want a map", k, v)
		}
		m = next
	}
	return m, nil
}

// settle sends requests for every client id until each answers as the
// variant expects: admitting variants register their newcomers (pending
// 429s until one re-plan registers them all), and the reject variant spends
// each client's share so that only over_limit answers remain. It works in
// passes over the ids still answering otherwise, a re-plan interval
// (min_cycle) apart: every newcomer is pending before the re-plan that
// registers it, and no registered client spends the window's budget in
// quick passes before the others are registered (a newcomer that finds the
// budget spent waits for the next window, an hour in the reject variant).
func settle(client *http.Client, in *instance, ids []string) error {
	deadline := time.Now().Add(settleTimeout)
	left := ids
	for {
		var still []string
		var lastErr error
		for _, id := range left {
			if err := probe(client, in, id); err != nil {
				still, lastErr = append(still, id), fmt.Errorf("client %s: %w", id, err)
			}
		}
		if len(still) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d clients do not answer as expected after %s; last: %w", len(still), settleTimeout, lastErr)
		}
		left = still
		time.Sleep(settlePause)
	}
}

// probe sends one request as client id and checks it against the
// variant's expectation.
func probe(client *http.Client, in *instance, id string) error {
	status, h, err := ask(client, in, id)
	if err != nil {
		return err
	}
	return in.expect.answer(status, h)
}

// ask sends one request as client id and returns its status and headers.
func ask(client *http.Client, in *instance, id string) (int, http.Header, error) {
	req, err := http.NewRequest(http.MethodGet, in.envoy.URL+"/", nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set(clientHeader, id)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

// measure runs one measured interval. Everything that costs Envoy CPU but
// is not the load (probes, admin reads) happens outside the window between
// the two CPU readings.
func measure(client *http.Client, in *instance, load wrkRun, ids []string, envoyCPU int) (sample, error) {
	if err := settle(client, in, ids); err != nil {
		return sample{}, err
	}
	before, err := ingressStatuses(client, in.envoy.AdminURL)
	if err != nil {
		return sample{}, err
	}
	cpu0, err := cpuTicks(in.pid)
	if err != nil {
		return sample{}, err
	}
	steal0, err := cpuSteal(envoyCPU)
	if err != nil {
		return sample{}, err
	}
	var sent0, ok0 uint64
	if in.honest != nil {
		sent0, ok0 = in.honest.counts()
	}
	t0 := time.Now()
	w, err := load.run()
	wall := time.Since(t0)
	if err != nil {
		return sample{}, err
	}
	var sent1, ok1 uint64
	if in.honest != nil {
		sent1, ok1 = in.honest.counts()
	}
	cpu1, err := cpuTicks(in.pid)
	if err != nil {
		return sample{}, err
	}
	steal1, err := cpuSteal(envoyCPU)
	if err != nil {
		return sample{}, err
	}
	after, err := ingressStatuses(client, in.envoy.AdminURL)
	if err != nil {
		return sample{}, err
	}
	if !in.envoy.Alive() {
		return sample{}, fmt.Errorf("envoy exited; log %s", in.envoy.LogPath)
	}
	st := after.minus(before)
	if err := in.expect.check(st, w); err != nil {
		return sample{}, err
	}
	// One more probe: the answers are still the variant's own (e.g. the
	// reject variant's 429s are over_limit, not some other reason).
	if err := probe(client, in, ids[0]); err != nil {
		return sample{}, fmt.Errorf("after the load: %w", err)
	}
	cpu := time.Duration(float64(cpu1-cpu0) / clockTicks() * float64(time.Second))
	steal := time.Duration(float64(steal1-steal0) / clockTicks() * float64(time.Second))
	return sample{
		qps:        float64(w.requests) / w.duration.Seconds(),
		cpuPerReq:  cpu / time.Duration(st.answered()),
		cpuShare:   cpu.Seconds() / wall.Seconds(),
		wrkShare:   w.cpu.Seconds() / w.wall.Seconds(),
		steal:      steal.Seconds() / wall.Seconds(),
		p50:        w.p50,
		p99:        w.p99,
		p999:       w.p999,
		statuses:   st,
		honestSent: sent1 - sent0,
		honestOK:   ok1 - ok0,
	}, nil
}

// checkStatuses fails a measured interval in which anything but the
// expected status came back, by Envoy's counters and by wrk's: a variant
// that rejected (or failed) some requests would be measured on a mix of
// paths and its cost would mean nothing.
func checkStatuses(want int, st statusCounts, w wrkResult) error {
	if st.answered() == 0 || w.requests == 0 {
		return fmt.Errorf("no requests completed (Envoy: %s; wrk: %d)", st, w.requests)
	}
	if st.ofClass(want) != st.answered() {
		return fmt.Errorf("responses other than %dxx: %s", want/100, st)
	}
	if e := w.socketErrors(); e > 0 {
		return fmt.Errorf("wrk socket errors: connect %d, read %d, write %d, timeout %d", w.connect, w.read, w.write, w.timeout)
	}
	wantNon2xx := uint64(0)
	if want >= 400 {
		wantNon2xx = w.requests
	}
	if w.non2xx3xx != wantNon2xx {
		return fmt.Errorf("wrk counted %d non-2xx/3xx responses of %d, want %d", w.non2xx3xx, w.requests, wantNon2xx)
	}
	return nil
}

// machine describes where the run happened, for the table's header.
func machine() string {
	cpu := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	load := "?"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	return fmt.Sprintf("%s, %d CPUs, %s/%s, load average %s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, load)
}
