package httpx

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

type textRule struct {
	Name  string            `json:"name"`
	Until time.Time         `json:"until"`
	Tags  map[string]string `json:"tags,omitempty"`
}

type textBody struct {
	Name   string     `json:"name"`
	Rules  []textRule `json:"rules"`
	Note   *string    `json:"note"`
	Hidden string     `json:"-"`
	Raw    []byte     `json:"raw"`
	textEmbedded
}

type textEmbedded struct {
	Owner string `json:"owner"`
}

// fieldsOf returns err's field problems, failing unless it is code.
func fieldsOf(t *testing.T, err error, code string) map[string]string {
	t.Helper()
	e, ok := err.(*tollgate.Error)
	if !ok || e.Code != code {
		t.Fatalf("error %v, want a %s *tollgate.Error", err, code)
	}
	return e.Fields
}

func TestTextFieldsNamesWhatPostgresCannotStore(t *testing.T) {
	nul := "a\x00b"
	for _, tc := range []struct {
		body  textBody
		field string
	}{
		{textBody{Name: nul}, "name"},
		{textBody{Rules: []textRule{{Name: "ok"}, {Name: nul}}}, "rules[1].name"},
		{textBody{Rules: []textRule{{Tags: map[string]string{"team": nul}}}}, "rules[0].tags.team"},
		{textBody{Rules: []textRule{{Tags: map[string]string{"te\x00am": "x"}}}}, `rules[0].tags."te\x00am"`},
		{textBody{Note: &nul}, "note"},
		{textBody{Name: "bad \xff utf-8"}, "name"},
		{textBody{textEmbedded: textEmbedded{Owner: nul}}, "owner"},
	} {
		if f := fieldsOf(t, TextFields(&tc.body), tollgate.EINVALID); f[tc.field] == "" {
			t.Errorf("%+v: fields %v, want %s named", tc.body, f, tc.field)
		}
	}
	fine := textBody{Name: "ok", Hidden: "\x00", Raw: []byte{0}, Rules: []textRule{{Name: "ünïcode"}}}
	if err := TextFields(&fine); err != nil {
		t.Errorf("storable body refused: %v", err)
	}
	if f := fieldsOf(t, TextFields(nul), tollgate.EINVALID); f["body"] == "" {
		t.Errorf("a bare string: fields %v, want body", f)
	}
}

func TestTextValuesNamesTheParameter(t *testing.T) {
	if f := fieldsOf(t, TextValues(url.Values{"q": {"ok", "x\x00"}, "a": {"fine"}}), tollgate.EINVALID); f["q"] == "" {
		t.Errorf("fields %v, want q", f)
	}
	if f := fieldsOf(t, TextValues(url.Values{"\xff": {"x"}}), tollgate.EINVALID); f[`"\xff"`] == "" {
		t.Errorf("fields %v, want the quoted name", f)
	}
	if err := TextValues(url.Values{"q": {"ünïcode"}}); err != nil {
		t.Errorf("storable values refused: %v", err)
	}
}

// A value its own type refuses (time.Time's UnmarshalJSON) is named, at
// any depth; encoding/json reports it without the field.
func TestDecodeNamesAFieldItsTypeRefused(t *testing.T) {
	for body, field := range map[string]string{
		`{"name":"x","rules":[{"until":"2026-01-01T00:00:00Z"},{"until":"tomorrow"}]}`: "rules[1].until",
		`{"rules":[{"name":"a","until":12}]}`:                                          "rules[0].until",
		`{"owner":"o","rules":[],"NAME":"x","rules":[{"until":"x"}]}`:                  "rules[0].until",
	} {
		var v textBody
		err := DecodeBody(httptest.NewRequest("POST", "/", strings.NewReader(body)), 1<<10, &v)
		f := fieldsOf(t, err, tollgate.EMALFORMED)
		if f[field] == "" {
			t.Errorf("%s: fields %v, want %s named", body, f, field)
		}
	}
	var v struct {
		At time.Time `json:"at"`
	}
	err := DecodeBody(httptest.NewRequest("POST", "/", strings.NewReader(`{"at":"soon"}`)), 1<<10, &v)
	if f := fieldsOf(t, err, tollgate.EMALFORMED); !strings.Contains(f["at"], "RFC 3339") {
		t.Errorf("fields %v, want at to be an RFC 3339 time", f)
	}
	// Unchanged for what encoding/json names itself.
	err = DecodeBody(httptest.NewRequest("POST", "/", strings.NewReader(`{"name":`)), 1<<10, &v)
	if f := fieldsOf(t, err, tollgate.EMALFORMED); f["body"] == "" {
		t.Errorf("truncated body: fields %v, want body", f)
	}
}
