package filter

import (
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// update rewrites docs/contract.md's field table from the schema:
// go test ./plugin/filter -run TestContractTableIsTheSchema -update
var update = flag.Bool("update", false, "rewrite docs/contract.md's field table from the schema")

const (
	contractPath = "../../docs/contract.md"
	tableHead    = "| field | type | default | valid values | meaning |\n|---|---|---|---|---|\n"
)

// contractTable is docs/contract.md's field table, a row a line, and
// the document around it.
func contractTable(t *testing.T) (before string, rows []string, after string) {
	t.Helper()
	raw, err := os.ReadFile(contractPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, tableHead)
	if i < 0 {
		t.Fatal("docs/contract.md has no field table")
	}
	i += len(tableHead)
	n := strings.Index(doc[i:], "\n\n")
	return doc[:i], strings.Split(doc[i:i+n], "\n"), doc[i+n:]
}

// tableRow is field f as a row of the contract's field table.
func tableRow(f *field) string {
	row := "|"
	for _, cell := range []string{"`" + f.name + "`", f.typ, f.def, f.valid, f.meaning} {
		if cell != "" {
			row += " " + cell
		}
		row += " |"
	}
	return row
}

// The contract's field table is the schema, row for row.
func TestContractTableIsTheSchema(t *testing.T) {
	before, rows, after := contractTable(t)
	if *update {
		var b strings.Builder
		for i := range schema {
			b.WriteString(tableRow(&schema[i]))
			if i < len(schema)-1 {
				b.WriteString("\n")
			}
		}
		if err := os.WriteFile(contractPath, []byte(before+b.String()+after), 0o644); err != nil {
			t.Fatal(err)
		}
		before, rows, after = contractTable(t)
	}
	for i := range max(len(rows), len(schema)) {
		switch {
		case i >= len(schema):
			t.Errorf("contract row %d is not in the schema: %s", i+1, rows[i])
		case i >= len(rows):
			t.Errorf("the schema's %s is not in the contract; its row:\n%s", schema[i].name, tableRow(&schema[i]))
		case rows[i] != tableRow(&schema[i]):
			t.Errorf("contract row %d differs from the schema; want:\n%s\ngot:\n%s", i+1, tableRow(&schema[i]), rows[i])
		}
	}
}

// With two fields wrong, the one first in the schema is reported, for
// every pair of the fields each limit parses. (null is wrong for each:
// a field is given a value or left out.)
func TestErrorsFollowTheSchemasOrder(t *testing.T) {
	var own []string
	for i := range schema {
		if schema[i].parse != nil || schema[i].name == "client_header" {
			own = append(own, schema[i].name)
		}
	}
	for i, first := range own {
		for _, second := range own[i+1:] {
			if first == "client_header" && second == "client_id" {
				continue // (one setting in two spellings: giving both is client_id's error)
			}
			cfg := `{"capacity": 10, "cycle": "10s", "` + first + `": null, "` + second + `": null}`
			_, err := ParseConfig([]byte(cfg))
			if err == nil || !strings.HasPrefix(err.Error(), first+": ") {
				t.Errorf("%s: %v, want %s's error", cfg, err, first)
			}
		}
	}
	if _, err := ParseConfig([]byte(`{"capacity": 10, "cycle": "10s", "mode": "x", "policy": "y"}`)); err == nil || !strings.HasPrefix(err.Error(), "mode: ") {
		t.Errorf("mode and policy wrong: %v, want mode's error", err)
	}
}

// The info line states every setting, by its field's name, in the
// schema's order; the ones it used to leave out included.
func TestSummaryShowsEveryField(t *testing.T) {
	s, err := ParseSettings([]byte(`{"capacity": 10, "cycle": "10s", "policy": "fair", "burst": 0.5, "weights": {"a": 2}, "max_share": 5, "caps": {"b": 3},
		"max_ids_per_peer": 4, "peer": "peer_principal"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `borrowcycle: limit "default": capacity 10 per 10s, reservation 0.1, client_id header "x-client-id", mode enforce, ` +
		`max_clients 1000, idle_cycles 3, min_cycle 1s, window_offset 0s, retry_after_jitter 0s, max_wait 0s, max_waiting 1000, ` +
		`failure_mode_deny false, rate_limit_headers x-ratelimit, headers_on_allowed true, status_code 429, max_client_id_bytes 256, ` +
		`max_ids_per_peer 4, peer peer_principal, debug_headers false, access_log true, log_client_id false, cost 1, match every request, ` +
		`policy fair, burst 0.5, weights 1 client, max_share 5, caps 1 client, fleet none`
	if got := (&Filter{set: s}).Summary(); got != want {
		t.Errorf("info line\n%s\nwant\n%s", got, want)
	}
	// (Caps are not allowed with fleet: its block, on a limit of its own.)
	s, err = ParseSettings([]byte(`{"capacity": 10, "cycle": "10s", "fleet": {"cluster": "g", "capacity": 30, "fallback_capacity": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	fleet := `, fleet {cluster "g", capacity 30, fallback_capacity 2, sync_interval 500ms, timeout 250ms}`
	if got := (&Filter{set: s}).Summary(); !strings.HasSuffix(got, fleet) {
		t.Errorf("info line %s\nwant it to end %s", got, fleet)
	}
}

// The bounds and choices the schema states for a field are the ones its
// parser enforces: a value just outside a stated integer range is refused
// naming that range, and a wrong choice is refused listing the stated
// choices.
func TestSchemaBoundsAreTheParsers(t *testing.T) {
	rangeRe := regexp.MustCompile("^(\\d+) to (\\d+)")
	choiceRe := regexp.MustCompile("`\"([a-z_-]+)\"`")
	checked := 0
	for i := range schema {
		f := &schema[i]
		if f.parse == nil && f.name != "capacity" {
			continue
		}
		cfg := func(v string) string {
			if f.name == "capacity" {
				return `{"cycle": "10s", "capacity": ` + v + `}`
			}
			return `{"capacity": 1099511627776, "cycle": "10s", "` + f.name + `": ` + v + `}`
		}
		if m := rangeRe.FindStringSubmatch(f.valid); f.typ == "integer" && m != nil {
			lo, _ := strconv.ParseInt(m[1], 10, 64)
			hi, _ := strconv.ParseInt(m[2], 10, 64)
			want := f.name + ": must be an integer in [" + m[1] + ", " + m[2] + "], got "
			for _, v := range []int64{lo - 1, hi + 1} {
				s := strconv.FormatInt(v, 10)
				if _, err := ParseConfig([]byte(cfg(s))); err == nil || err.Error() != want+s {
					t.Errorf("%s: %v, want %q", cfg(s), err, want+s)
				}
			}
			for _, v := range []int64{lo, hi} {
				if _, err := ParseConfig([]byte(cfg(strconv.FormatInt(v, 10)))); err != nil && strings.HasPrefix(err.Error(), f.name+": ") {
					t.Errorf("%s: %v, want %d accepted", f.name, err, v)
				}
			}
			checked++
		}
		if ms := choiceRe.FindAllStringSubmatch(f.valid, -1); f.typ == "string" && len(ms) > 1 {
			var quoted []string
			for _, m := range ms {
				quoted = append(quoted, strconv.Quote(m[1]))
				if _, err := ParseConfig([]byte(cfg(strconv.Quote(m[1])))); err != nil {
					t.Errorf("%s %q: %v, want it accepted", f.name, m[1], err)
				}
			}
			want := f.name + `: must be one of ` + strings.Join(quoted, ", ") + `, got "nope"`
			if _, err := ParseConfig([]byte(cfg(`"nope"`))); err == nil || err.Error() != want {
				t.Errorf("%s: %v, want %q", f.name, err, want)
			}
			checked++
		}
	}
	if checked < 12 {
		t.Errorf("checked the bounds of %d fields; the schema states more", checked)
	}
}
