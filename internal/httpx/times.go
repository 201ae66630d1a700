package httpx

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"time"

	"github.com/tollgate/tollgate"
)

// TimeFields returns an EINVALID error naming the first field of v (a
// decoded JSON request body) that holds a time outside
// tollgate.MinTime–MaxTime (tollgate.CheckTime); nil when there is none.
// RFC 3339 lets an offset carry a time past them ("9999-12-31T23:59:59-01:00"
// is in year 10000 in UTC), and encoding/json cannot write such a time
// back: checked here, every time field of every body is refused with its
// name, those added later too. Fields are named as in the JSON
// ("expires_at", "rules[1].from"); a wrapper of a time that decodes
// itself (a nullable time) is named as its field.
func TimeFields(v any) error {
	if path, ok := badTime(reflect.ValueOf(v), ""); ok {
		if path == "" {
			path = "body"
		}
		return tollgate.Invalid(map[string]string{path: tollgate.TimeRangeProblem})
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// badTime returns the path of the first time in v outside tollgate's
// range.
func badTime(v reflect.Value, path string) (string, bool) {
	return firstBad(v, path, func(v reflect.Value) (bad, leaf bool) {
		switch {
		case v.Kind() == reflect.Struct && v.Type() == timeType:
			t, _ := v.Interface().(time.Time)
			return !tollgate.InTimeRange(t), true
		case v.Kind() == reflect.String:
			return false, true
		}
		return false, false
	})
}

// firstBad walks v, a decoded JSON value, and returns the JSON path (from
// path) of the first value in it that bad says is bad, in a stable
// order: elements in order, a map's keys sorted (each key before its
// value; a key is named quoted), a struct's fields as the JSON names
// them. bad sees each value before its parts; leaf stops the walk below
// it. A byte slice is not walked (bytes, not text), nor a nil pointer;
// an embedded struct's fields are the struct's own, and a type that
// decodes itself (a nullable time) stands for one JSON value: its fields
// are named as it is.
func firstBad(v reflect.Value, path string, bad func(reflect.Value) (bad, leaf bool)) (string, bool) {
	if b, leaf := bad(v); leaf {
		return path, b
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return firstBad(v.Elem(), path, bad)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false
		}
		for i := range v.Len() {
			if p, b := firstBad(v.Index(i), path+"["+strconv.Itoa(i)+"]", bad); b {
				return p, true
			}
		}
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			if p, b := firstBad(k, join(path, strconv.QuoteToASCII(k.String())), bad); b {
				return p, true
			}
			if p, b := firstBad(v.MapIndex(k), join(path, k.String()), bad); b {
				return p, true
			}
		}
	case reflect.Struct:
		wrapper := reflect.PointerTo(v.Type()).Implements(unmarshalerType)
		for _, f := range reflect.VisibleFields(v.Type()) {
			if !f.IsExported() || f.Anonymous && f.Tag.Get("json") == "" {
				continue
			}
			name := jsonName(f)
			if name == "" {
				continue
			}
			fv, err := v.FieldByIndexErr(f.Index)
			if err != nil {
				continue // through a nil embedded pointer
			}
			fieldPath := join(path, name)
			if wrapper {
				fieldPath = path
			}
			if p, b := firstBad(fv, fieldPath, bad); b {
				return p, true
			}
		}
	}
	return "", false
}
