// Package e2e drives a real Envoy running the compiled plugin over HTTP.
//
// Environment:
//
//	BORROWCYCLE_ENVOY          Envoy binary (make test-e2e sets build/envoy)
//	BORROWCYCLE_WASM           the plugin module (make test-e2e sets build/borrowcycle.wasm)
//	BORROWCYCLE_REQUIRE_ENVOY  1: a missing Envoy fails the suite instead of skipping it (CI)
//	BORROWCYCLE_E2E_TARGET     "compose": test a running `docker compose up` stack instead
//	                           of starting Envoys; only the tests that need nothing but the
//	                           shipped envoy/envoy.yaml run, the others skip and say why
//	BORROWCYCLE_E2E_URL        compose target's listener (default http://127.0.0.1:10000)
//	BORROWCYCLE_E2E_ADMIN_URL  compose target's admin (default http://127.0.0.1:9901)
package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
	"github.com/borrowcycle/borrowcycle/plugin/filter"
)

// setup is what TestMain found in the environment.
var setup struct {
	compose    bool
	url, admin string // compose target
	envoy      string
	wasm       string
	skipReason string // why no local Envoy can run; empty when one can
	require    bool
}

func TestMain(m *testing.M) {
	resolveSetup()
	if setup.skipReason != "" && !setup.compose {
		verb := "SKIP"
		if setup.require {
			verb = "FAIL (BORROWCYCLE_REQUIRE_ENVOY=1)"
		}
		bar := strings.Repeat("!", 78)
		fmt.Fprintf(os.Stderr, "%s\n!! e2e %s: %s\n!! Run `make test-e2e` (it fetches Envoy) or set BORROWCYCLE_ENVOY.\n%s\n",
			bar, verb, setup.skipReason, bar)
	}
	os.Exit(m.Run())
}

func resolveSetup() {
	setup.require = os.Getenv("BORROWCYCLE_REQUIRE_ENVOY") == "1"
	setup.compose = os.Getenv("BORROWCYCLE_E2E_TARGET") == "compose"
	setup.url = envOr("BORROWCYCLE_E2E_URL", "http://127.0.0.1:10000")
	setup.admin = envOr("BORROWCYCLE_E2E_ADMIN_URL", "http://127.0.0.1:9901")
	setup.wasm = os.Getenv("BORROWCYCLE_WASM")
	setup.envoy = os.Getenv("BORROWCYCLE_ENVOY")
	switch {
	case setup.envoy == "":
		setup.skipReason = "BORROWCYCLE_ENVOY is not set, so there is no Envoy to test against"
	default:
		st, err := os.Stat(setup.envoy)
		switch {
		case err != nil:
			setup.skipReason = fmt.Sprintf("BORROWCYCLE_ENVOY=%s: %v", setup.envoy, err)
		case st.IsDir() || st.Mode()&0o111 == 0:
			setup.skipReason = fmt.Sprintf("BORROWCYCLE_ENVOY=%s is not an executable file", setup.envoy)
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// needLocalEnvoy skips (or, under BORROWCYCLE_REQUIRE_ENVOY=1, fails) a test
// when no Envoy binary is available, and fails it when the module is
// missing: a missing build is a mistake, not an environment limitation.
func needLocalEnvoy(t *testing.T) {
	t.Helper()
	if setup.skipReason != "" {
		if setup.require {
			t.Fatalf("Envoy unavailable and BORROWCYCLE_REQUIRE_ENVOY=1: %s", setup.skipReason)
		}
		t.Skipf("SKIP (no Envoy): %s", setup.skipReason)
	}
	if setup.wasm == "" {
		t.Fatal("BORROWCYCLE_WASM is not set: run make build, then make test-e2e")
	}
	if _, err := os.Stat(setup.wasm); err != nil {
		t.Fatalf("plugin module %s: %v: run make build", setup.wasm, err)
	}
}

// target is an Envoy under test: one this test started, or the compose stack.
type target struct {
	url, admin string
	settings   settings
	envoy      *envoyrun.Envoy // nil for the compose stack
}

// startOpts tunes the bootstrap of a locally started Envoy.
type startOpts struct {
	concurrency int
	// name prefixes the Envoy's files in the test's log directory (default
	// "envoy"): tests that run several Envoys name each.
	name string
	// edit changes the rendered bootstrap (e.g. the header size limit).
	edit func(*envoyrun.Bootstrap) error
}

// shippedTarget returns an Envoy running envoy/envoy.yaml exactly as shipped
// (plugin configuration included): the compose stack, or a local Envoy.
func shippedTarget(t *testing.T, o startOpts) *target {
	t.Helper()
	b, err := envoyrun.DefaultBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	s := bootstrapSettings(t, b, "envoy/envoy.yaml")
	if setup.compose {
		if o.edit != nil {
			t.Skip("compose target: this test needs its own bootstrap, which a running stack cannot take")
		}
		return &target{url: setup.url, admin: setup.admin, settings: s}
	}
	return startLocal(t, b, s, o)
}

// configuredTarget starts a local Envoy whose plugin runs cfg (a JSON object
// per docs/contract.md). Under the compose target it skips: the stack runs
// the shipped configuration only.
func configuredTarget(t *testing.T, cfg map[string]any, o startOpts) *target {
	t.Helper()
	if setup.compose {
		t.Skip("compose target: this test needs its own plugin configuration, which a running stack cannot take")
	}
	raw := mustJSON(t, cfg)
	s, err := parseSettings(raw)
	if err != nil {
		t.Fatalf("test configuration %s: %v", raw, err)
	}
	b, err := envoyrun.DefaultBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetPluginConfig(raw); err != nil {
		t.Fatal(err)
	}
	return startLocal(t, b, s, o)
}

// localBootstrap is envoy/envoy.yaml pointed at the built module, with the
// plugin configuration replaced when pluginConfig is not empty, for tests
// that validate or start a local Envoy themselves.
func localBootstrap(t *testing.T, pluginConfig string) *envoyrun.Bootstrap {
	t.Helper()
	needLocalEnvoy(t)
	b, err := envoyrun.DefaultBootstrap()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetWasmFile(setup.wasm); err != nil {
		t.Fatal(err)
	}
	if pluginConfig != "" {
		if err := b.SetPluginConfig(pluginConfig); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func startLocal(t *testing.T, b *envoyrun.Bootstrap, s settings, o startOpts) *target {
	t.Helper()
	needLocalEnvoy(t)
	if err := b.SetWasmFile(setup.wasm); err != nil {
		t.Fatal(err)
	}
	if o.edit != nil {
		if err := o.edit(b); err != nil {
			t.Fatal(err)
		}
	}
	if o.concurrency == 0 {
		o.concurrency = 2
	}
	e, err := envoyrun.Start(context.Background(), envoyrun.Options{
		Envoy:       setup.envoy,
		Bootstrap:   b,
		Concurrency: o.concurrency,
		Dir:         logDir(t),
		Name:        cmp.Or(o.name, "envoy"),
	})
	if err != nil {
		t.Fatalf("start envoy: %v", err)
	}
	tg := &target{url: e.URL, admin: e.AdminURL, settings: s, envoy: e}
	t.Cleanup(func() { tg.finish(t) })
	return tg
}

// finish checks that Envoy and the plugin survived the test, stops Envoy,
// and shows its log when the test failed.
func (tg *target) finish(t *testing.T) {
	if !tg.envoy.Alive() {
		t.Errorf("envoy exited during the test")
	} else {
		tg.checkNoCrash(t)
	}
	if err := tg.envoy.Stop(); err != nil {
		t.Errorf("stop envoy: %v", err)
	}
	if t.Failed() {
		t.Logf("envoy log: %s\n%s", tg.envoy.LogPath, tg.envoy.LogTail(60))
	}
}

// flushedStats reads the admin stats once every worker has ticked since
// the caller's last request: the plugin counts in the VM and hands its
// counters to Envoy on tick (docs/contract.md, Metrics). Two periods cover
// a tick that was running when the last request arrived. (Counters go
// with housekeeping, which keeps its period when ticks come more often
// for held requests.)
func (tg *target) flushedStats() (map[string]int64, error) {
	time.Sleep(2*tg.settings.HousekeepingPeriod() + 100*time.Millisecond)
	return fetchStats(tg.admin)
}

// checkNoCrash fails the test when the plugin panicked or its VM was
// reloaded: failure_policy FAIL_RELOAD would otherwise hide a trapped VM
// behind a fresh one.
func (tg *target) checkNoCrash(t *testing.T) {
	st, err := tg.flushedStats()
	if err != nil {
		t.Errorf("read stats after the test: %v", err)
		return
	}
	for _, name := range []string{
		"wasm.borrowcycle.vm_reload",
		"wasmcustom.borrowcycle." + filter.MetricsName(tg.settings.Name, tg.settings.EngineWindows()[0]) + ".panics",
	} {
		if v, ok := st[name]; !ok {
			t.Errorf("stat %s missing", name)
		} else if v != 0 {
			t.Errorf("stat %s = %d, want 0", name, v)
		}
	}
}

var (
	unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)
	logDirsMu  sync.Mutex
	logDirs    = map[string]bool{}
)

// logDir is where a test's Envoy config and log go: e2e/logs/<test>, kept
// after the run (git ignores it) so a failure can be read in full.
// The first call of a test empties the directory left by an earlier run.
func logDir(t *testing.T) string {
	dir := filepath.Join("logs", unsafeName.ReplaceAllString(t.Name(), "_"))
	logDirsMu.Lock()
	fresh := !logDirs[dir]
	logDirs[dir] = true
	logDirsMu.Unlock()
	if fresh {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// settings is the plugin configuration a test runs, with every default
// filled in by the plugin's own parser: its primary limit (the only one in
// the single-limit form), whose metrics also count the plugin's panics.
type settings = filter.Config

// bootstrapSettings is the primary limit of b's plugin configuration, as
// the plugin parses it; file names b in a failure.
func bootstrapSettings(t *testing.T, b *envoyrun.Bootstrap, file string) settings {
	t.Helper()
	raw, err := b.PluginConfig()
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseSettings(raw)
	if err != nil {
		t.Fatalf("plugin configuration in %s: %v", file, err)
	}
	return s
}

func parseSettings(raw string) (settings, error) {
	s, err := filter.ParseSettings([]byte(raw))
	if err != nil {
		return settings{}, err
	}
	return s.Limits[s.Primary()], nil
}
