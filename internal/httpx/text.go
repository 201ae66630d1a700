package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
)

// Postgres stores text only as valid UTF-8 without NUL characters; a value
// that is not is refused there (SQLSTATE 22021) with no word of which
// field held it. The admin servers refuse it first, naming the field.

// badText is the message for a field that cannot be stored as text.
const badText = "must be UTF-8 text without NUL characters"

// storable reports whether Postgres can store s as text.
func storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// TextFields returns an EINVALID error naming the first field of v (a
// decoded JSON request body) whose string, or map key, Postgres cannot
// store; nil when there is none. Fields are named as in the JSON
// ("rules[1].name", "metadata.team").
func TextFields(v any) error {
	if path, ok := badString(reflect.ValueOf(v), ""); ok {
		if path == "" {
			path = "body"
		}
		return unstorable(path)
	}
	return nil
}

// TextValues returns an EINVALID error naming the first parameter of vals
// (a query or a form) whose name or value Postgres cannot store.
func TextValues(vals url.Values) error {
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !storable(k) {
			return unstorable(strconv.QuoteToASCII(k))
		}
		for _, v := range vals[k] {
			if !storable(v) {
				return unstorable(k)
			}
		}
	}
	return nil
}

// TextOnly answers, through fail, a request whose path or query holds
// text Postgres cannot store (a %00, an invalid UTF-8 sequence) before any
// handler reads it.
func TextOnly(fail func(http.ResponseWriter, *http.Request, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !storable(r.URL.Path) {
				fail(w, r, unstorable("path"))
				return
			}
			if r.URL.RawQuery != "" {
				if err := TextValues(r.URL.Query()); err != nil {
					fail(w, r, err)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func unstorable(field string) error {
	return &tollgate.Error{Code: tollgate.EINVALID, Message: field + " " + badText,
		Fields: map[string]string{field: badText}}
}

// badString returns the path of the first string in v that is not
// storable (a map's key included).
func badString(v reflect.Value, path string) (string, bool) {
	return firstBad(v, path, func(v reflect.Value) (bad, leaf bool) {
		if v.Kind() == reflect.String {
			return !storable(v.String()), true
		}
		return false, false
	})
}

// jsonName is f's name in JSON, "" when encoding/json leaves it out.
func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return ""
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name
	}
	return f.Name
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

var timeType = reflect.TypeFor[time.Time]()

// valueError names the field whose value its own type refused (a time
// that is not RFC 3339, say): encoding/json reports such an error without
// the field. read is what the decoder had read of the body, t the type
// decoded into; ok is false for every error decodeError names itself.
func valueError(err error, read []byte, t reflect.Type) (field, msg string, ok bool) {
	var maxErr *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	if errors.As(err, &maxErr) || errors.As(err, &typeErr) || errors.As(err, &syntaxErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.HasPrefix(err.Error(), "json: unknown field ") {
		return "", "", false
	}
	field, ft := refused(read, t, "")
	switch {
	case field == "":
		return "", "", false
	case ft == timeType || ft.Kind() == reflect.Struct && ft.NumField() > 0 && hasTime(ft):
		return field, "must be an RFC 3339 time (e.g. 2026-12-01T00:00:00Z)", true
	}
	return field, "is not a valid value: " + strings.TrimPrefix(err.Error(), "json: "), true
}

// hasTime reports whether t is a wrapper of a time (a struct with a time
// or a pointer to one), as a nullable time field is.
func hasTime(t reflect.Type) bool {
	for i := range t.NumField() {
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft == timeType {
			return true
		}
	}
	return false
}

// refused returns the path (under path) and type of the innermost member
// of the JSON value raw that does not decode into its part of t on its
// own; "" when none is found (raw cut short before it, say).
func refused(raw []byte, t reflect.Type, path string) (string, reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	switch t.Kind() {
	case reflect.Struct:
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return "", nil
		}
		for dec.More() {
			tok, err := dec.Token()
			key, _ := tok.(string)
			var val json.RawMessage
			if err != nil || dec.Decode(&val) != nil {
				return "", nil
			}
			f, ok := member(t, key)
			if !ok || json.Unmarshal(val, reflect.New(f.Type).Interface()) == nil {
				continue
			}
			name := join(path, key)
			if sub, st := refused(val, f.Type, name); sub != "" {
				return sub, st
			}
			return name, f.Type
		}
	case reflect.Slice, reflect.Array:
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return "", nil
		}
		for i := 0; dec.More(); i++ {
			var val json.RawMessage
			if dec.Decode(&val) != nil {
				return "", nil
			}
			if json.Unmarshal(val, reflect.New(t.Elem()).Interface()) == nil {
				continue
			}
			name := path + "[" + strconv.Itoa(i) + "]"
			if sub, st := refused(val, t.Elem(), name); sub != "" {
				return sub, st
			}
			return name, t.Elem()
		}
	}
	return "", nil
}

// member is the field of struct t that the JSON key name decodes into:
// its exact name first, else one equal under case folding, as
// encoding/json chooses.
func member(t reflect.Type, name string) (reflect.StructField, bool) {
	var folded reflect.StructField
	found := false
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Tag.Get("json") == "" {
			continue
		}
		switch n := jsonName(f); {
		case n == name:
			return f, true
		case !found && strings.EqualFold(n, name):
			folded, found = f, true
		}
	}
	return folded, found
}
