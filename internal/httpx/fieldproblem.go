package httpx

import (
	"encoding/json"
	"errors"
	"reflect"

	"github.com/tollgate/tollgate"
)

// FieldProblem names the field of the JSON value data that made decoding
// it into a value of type t fail with err (from json.Unmarshal or a
// json.Decoder), and says what is wrong with it, in the words Decode's
// EMALFORMED errors use: the field's path in JSON names, with each array
// element's index ("plans[0].rules[0].limit"; "" for data itself), and
// the problem ("must be a JSON integer"). ok is false for the errors that
// are not about one value: malformed JSON, an unknown field, data cut
// short.
//
// It is for decoding documents that are not request bodies (the admin
// CLI's plan files and flags), so that they answer a mistake as the API
// answers it.
func FieldProblem(err error, data []byte, t reflect.Type) (field, problem string, ok bool) {
	if field, problem, ok := valueError(err, data, t); ok {
		return field, problem, true
	}
	var typeErr *json.UnmarshalTypeError
	var e *tollgate.Error
	if !errors.As(err, &typeErr) || !errors.As(decodeError(err), &e) || len(e.Fields) != 1 {
		return "", "", false
	}
	for _, p := range e.Fields {
		problem = p
	}
	// encoding/json names the field without the array indexes (and with
	// embedded structs' Go names): find it again in data.
	if field, _ = refused(data, t, ""); field == "" {
		field = typeErr.Field
	}
	return field, problem, true
}
