package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// shipped holds the scenarios that -all runs. They are embedded so that the
// tool and its tests find them wherever they run from.
//
//go:embed scenarios/*.yaml
var shipped embed.FS

// Scenario is one simulation input. Every field maps to a YAML/JSON key of
// the same name in snake_case; README.md in this folder documents them.
type Scenario struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Capacity    int64    `yaml:"capacity"`
	Cycle       Duration `yaml:"cycle"`
	// Reservation is a pointer so that an explicit 0 differs from "use the
	// engine default".
	Reservation *float64 `yaml:"reservation"`
	MinCycle    Duration `yaml:"min_cycle"`
	// Burst turns pacing on (engine Config.Pace) with this burst fraction;
	// absent, the scenario is not paced.
	Burst       *float64 `yaml:"burst"`
	IdleCycles  int      `yaml:"idle_cycles"`
	MaxClients  int      `yaml:"max_clients"`
	Passthrough bool     `yaml:"passthrough"`
	Workers     int      `yaml:"workers"`
	Spread      string   `yaml:"spread"`
	Tick        Duration `yaml:"tick"`
	Cycles      int      `yaml:"cycles"`
	Seed        uint64   `yaml:"seed"`
	// Preregister registers every client that sends from cycle 1 at t=0, so
	// the first cycle already splits capacity between all of them, as in the
	// worked example (scenarios/worked-example.yaml). Default true.
	Preregister *bool        `yaml:"preregister"`
	Metrics     MetricsSpec  `yaml:"metrics"`
	Clients     []ClientSpec `yaml:"clients"`
}

// MetricsSpec parameterises the metrics that need more than one run or a
// point of reference.
type MetricsSpec struct {
	// Inflate names the client (or group) whose demand is multiplied by
	// Factor in a second run, to measure the gain from inflating demand.
	Inflate string  `yaml:"inflate"`
	Factor  float64 `yaml:"factor"`
	// Step is the cycle at which demand steps, for convergence. 0 takes the
	// first step or burst arrival's start.
	Step int `yaml:"step"`
}

// ClientSpec is one client, or a group of Count identical clients named
// name-1 … name-Count that tables and charts show as one row.
type ClientSpec struct {
	Name    string   `yaml:"name"`
	Count   int      `yaml:"count"`
	Demand  []int64  `yaml:"demand"`
	Arrival *Arrival `yaml:"arrival"`
	// Join is the first cycle the client sends in (default 1); Leave the
	// first cycle it no longer sends in (0: never).
	Join  int `yaml:"join"`
	Leave int `yaml:"leave"`
	// JoinRate spreads a group's members over cycles as Poisson arrivals
	// with this mean per cycle (from Join on); Lifetime is then how many
	// cycles each member sends for (0: until Leave).
	JoinRate float64 `yaml:"join_rate"`
	Lifetime int     `yaml:"lifetime"`
	// JoinMode says how a client that joins after cycle 1 becomes known:
	// "request" (default) through the engine's newcomer path on its first
	// request, or "register" at the start of its first cycle.
	JoinMode string `yaml:"join_mode"`
	Retry    Retry  `yaml:"retry"`
	// Adversary marks clients that attack the limiter (spoofed ids): the
	// fairness metrics are about the honest clients, so these are left out
	// of the max-min target and of light-client rejection.
	Adversary bool `yaml:"adversary"`
	// Weight is each member's weight (engine Config.Weights; 0 means 1):
	// a member of weight w counts as w clients in the equal split, and
	// the max-min target and light-client threshold are weighted too.
	Weight float64 `yaml:"weight"`
}

// Retry is what a client does with a 429.
type Retry struct {
	// Max is how many times one request is retried after 429s.
	Max int `yaml:"max"`
	// Delay is the wait before each retry (default 100ms).
	Delay Duration `yaml:"delay"`
	// HonorRetryAfter waits at least what the Retry-After header says: the
	// engine's retry time in whole seconds, rounded up (RFC 9110), as an
	// HTTP client reads it.
	HonorRetryAfter bool `yaml:"honor_retry_after"`
}

// HonourRetryAfter makes every client retry each 429 when its
// Retry-After says, up to 5 times (-retry-after), whatever its own retry.
func (sc *Scenario) HonourRetryAfter() {
	for i := range sc.Clients {
		sc.Clients[i].Retry = Retry{Max: 5, Delay: sc.Clients[i].Retry.Delay, HonorRetryAfter: true}
	}
}

// Duration is a time.Duration written as "10s" in YAML and JSON.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	return d.parse(s)
}

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// LoadScenario reads a scenario from a file, or from the shipped set when
// ref is a shipped scenario's name and no such file exists.
func LoadScenario(ref string) (*Scenario, error) {
	data, err := os.ReadFile(ref)
	name := ref
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(ref, `/\`) {
		name = path.Join("scenarios", strings.TrimSuffix(ref, ".yaml")+".yaml")
		data, err = shipped.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	sc, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return sc, nil
}

// ShippedScenarios loads every embedded scenario, sorted by file name.
func ShippedScenarios() ([]*Scenario, error) {
	entries, err := shipped.ReadDir("scenarios")
	if err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var out []*Scenario
	for _, e := range entries {
		sc, err := LoadScenario(strings.TrimSuffix(e.Name(), ".yaml"))
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// ParseScenario decodes a scenario from YAML or JSON (JSON is YAML's flow
// style, so one decoder and one set of keys serve both), rejecting unknown
// keys (a misspelt key silently ignored would make a scenario test
// something else), then fills defaults and validates it.
func ParseScenario(data []byte) (*Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return nil, err
	}
	sc.fillDefaults()
	if err := sc.validate(); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (sc *Scenario) fillDefaults() {
	if sc.Workers == 0 {
		sc.Workers = 1
	}
	if sc.Spread == "" {
		sc.Spread = spreadRoundRobin
	}
	if sc.Tick == 0 {
		sc.Tick = sc.Cycle / 10
	}
	if sc.Preregister == nil {
		t := true
		sc.Preregister = &t
	}
	if sc.Metrics.Factor == 0 {
		sc.Metrics.Factor = 2
	}
	if sc.Metrics.Inflate == "" && len(sc.Clients) > 0 {
		sc.Metrics.Inflate = sc.Clients[0].Name
	}
	for i := range sc.Clients {
		c := &sc.Clients[i]
		if c.Count == 0 {
			c.Count = 1
		}
		if c.Join == 0 {
			c.Join = 1
		}
		if c.JoinMode == "" {
			c.JoinMode = joinRequest
		}
		if c.Retry.Delay == 0 {
			c.Retry.Delay = Duration(100 * time.Millisecond)
		}
	}
}

const (
	spreadRoundRobin = "round_robin"
	spreadByClient   = "by_client"
	joinRequest      = "request"
	joinRegister     = "register"
)

// validate checks what the simulator itself needs; the engine validates its
// own configuration when the run starts.
func (sc *Scenario) validate() error {
	switch {
	case sc.Name == "":
		return errors.New("name: required")
	case sc.Cycle <= 0:
		return errors.New("cycle: required, e.g. \"10s\"")
	case sc.Cycles < 1 || sc.Cycles > 10000:
		return fmt.Errorf("cycles: must be in [1, 10000], got %d", sc.Cycles)
	case sc.Workers < 1 || sc.Workers > 64:
		return fmt.Errorf("workers: must be in [1, 64], got %d", sc.Workers)
	case sc.Spread != spreadRoundRobin && sc.Spread != spreadByClient:
		return fmt.Errorf("spread: must be %q or %q, got %q", spreadRoundRobin, spreadByClient, sc.Spread)
	case sc.Tick < 0 || sc.Tick > sc.Cycle:
		return fmt.Errorf("tick: must be in (0, cycle], got %s", time.Duration(sc.Tick))
	case len(sc.Clients) == 0:
		return errors.New("clients: at least one is required")
	case sc.Metrics.Factor <= 0:
		return fmt.Errorf("metrics.factor: must be > 0, got %v", sc.Metrics.Factor)
	}
	seen := map[string]bool{}
	for i := range sc.Clients {
		c := &sc.Clients[i]
		if err := c.validate(); err != nil {
			return fmt.Errorf("clients[%d] (%s): %w", i, c.Name, err)
		}
		if seen[c.Name] {
			return fmt.Errorf("clients[%d]: duplicate name %q", i, c.Name)
		}
		seen[c.Name] = true
	}
	if !seen[sc.Metrics.Inflate] {
		return fmt.Errorf("metrics.inflate: no client named %q", sc.Metrics.Inflate)
	}
	return nil
}

func (c *ClientSpec) validate() error {
	switch {
	case c.Name == "":
		return errors.New("name: required")
	case c.Count < 1 || c.Count > 100000:
		return fmt.Errorf("count: must be in [1, 100000], got %d", c.Count)
	case (c.Demand == nil) == (c.Arrival == nil):
		return errors.New("exactly one of demand and arrival is required")
	case c.Join < 1:
		return fmt.Errorf("join: must be >= 1, got %d", c.Join)
	case c.Leave != 0 && c.Leave <= c.Join:
		return fmt.Errorf("leave: must be after join (%d), got %d", c.Join, c.Leave)
	case c.JoinRate < 0 || c.Lifetime < 0:
		return errors.New("join_rate and lifetime must not be negative")
	case c.JoinMode != joinRequest && c.JoinMode != joinRegister:
		return fmt.Errorf("join_mode: must be %q or %q, got %q", joinRequest, joinRegister, c.JoinMode)
	case c.Retry.Max < 0 || c.Retry.Max > 100 || c.Retry.Delay < 0:
		return errors.New("retry: max must be in [0, 100] and delay not negative")
	}
	for i, d := range c.Demand {
		if d < 0 {
			return fmt.Errorf("demand[%d]: must not be negative", i)
		}
	}
	if c.Arrival != nil {
		return c.Arrival.validate()
	}
	return nil
}
