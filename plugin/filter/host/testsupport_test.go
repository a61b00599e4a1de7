package host

import "testing"

func TestParseVMConfig(t *testing.T) {
	full := `{"test_support": {"clock_property": "a.b", "memory_property": "c", "zero_cas": true}}`
	if c, err := parseVMConfig([]byte(full)); err != nil || c != (testSupport{ClockProperty: "a.b", MemoryProperty: "c", ZeroCAS: true}) {
		t.Errorf("every field: %+v, %v", c, err)
	}
	for _, empty := range []string{"", "  ", "{}", `{"test_support": {}}`} {
		if c, err := parseVMConfig([]byte(empty)); err != nil || c != (testSupport{}) {
			t.Errorf("%q: %+v, %v", empty, c, err)
		}
	}
	for _, bad := range []string{
		`{"clock_property": "a"}`,                   // the hooks live under test_support
		`{"test_support": {"clock": "a"}}`,          // unknown hook
		`{"test_support": {"Clock_Property": "a"}}`, // names are exact
		`{"test_support": {"zero_cas": "yes"}}`,
		`[]`,
	} {
		if _, err := parseVMConfig([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
