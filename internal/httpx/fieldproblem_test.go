package httpx

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestFieldProblem: a value of the wrong kind, or one its own type
// refuses, is named by its path with array indexes, in Decode's words.
func TestFieldProblem(t *testing.T) {
	type rule struct {
		Name  string `json:"name"`
		Limit int64  `json:"limit"`
	}
	type inner struct {
		Rules []rule `json:"rules"`
	}
	type plan struct {
		inner
		Archived bool `json:"archived"`
	}
	type file struct {
		Plans []plan `json:"plans"`
	}
	cases := []struct {
		data        string
		into        any
		field, want string
		notAboutOne bool
	}{
		{data: `{"plans":[{"rules":[{"limit":"x"}]}]}`, into: &file{}, field: "plans[0].rules[0].limit", want: "must be a JSON integer"},
		{data: `{"plans":[{},{"archived":1}]}`, into: &file{}, field: "plans[1].archived", want: "must be a JSON boolean"},
		{data: `[{"name":"a"},{"name":1}]`, into: &[]rule{}, field: "[1].name", want: "must be a JSON string"},
		{data: `"nope"`, into: &[]rule{}, field: "", want: "must be a JSON array"},
		{data: `{"rules":{}}`, into: &inner{}, field: "rules", want: "must be a JSON array"},
		{data: `[{"at":"2026-01-01T00:00:00Z"},{"at":"soon"}]`, into: &[]struct {
			At time.Time `json:"at"`
		}{}, field: "[1].at", want: "must be an RFC 3339 time (e.g. 2026-12-01T00:00:00Z)"},
		{data: `{"plans":`, into: &file{}, notAboutOne: true},
		{data: `{"plans":[}`, into: &file{}, notAboutOne: true},
	}
	for _, c := range cases {
		err := json.Unmarshal([]byte(c.data), c.into)
		if err == nil {
			t.Fatalf("%s: decoded", c.data)
		}
		field, problem, ok := FieldProblem(err, []byte(c.data), reflect.TypeOf(c.into))
		if ok == c.notAboutOne || field != c.field || problem != c.want {
			t.Errorf("%s: FieldProblem(%v) = %q, %q, %v; want %q, %q, %v", c.data, err, field, problem, ok, c.field, c.want, !c.notAboutOne)
		}
	}
}
