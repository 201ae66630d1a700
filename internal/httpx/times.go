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

// badTime walks v and returns the path of the first time in it outside
// tollgate's range.
func badTime(v reflect.Value, path string) (string, bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return badTime(v.Elem(), path)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 || v.Type().Elem().Kind() == reflect.String {
			return "", false
		}
		for i := range v.Len() {
			if p, bad := badTime(v.Index(i), path+"["+strconv.Itoa(i)+"]"); bad {
				return p, true
			}
		}
	case reflect.Map:
		if v.Type().Elem().Kind() == reflect.String {
			return "", false
		}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			if p, bad := badTime(v.MapIndex(k), join(path, k.String())); bad {
				return p, true
			}
		}
	case reflect.Struct:
		if v.Type() == timeType {
			t, _ := v.Interface().(time.Time)
			return path, !tollgate.InTimeRange(t)
		}
		// A type that decodes itself stands for one JSON value: its
		// fields are not the JSON's members.
		wrapper := reflect.PointerTo(v.Type()).Implements(unmarshalerType)
		for _, f := range reflect.VisibleFields(v.Type()) {
			if !f.IsExported() || f.Anonymous && f.Tag.Get("json") == "" {
				continue // an embedded struct's fields are visited as its own
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
			if p, bad := badTime(fv, fieldPath); bad {
				return p, true
			}
		}
	}
	return "", false
}
