// Package apispec loads openapi.yaml, the document the admin and check
// APIs are held to, for the tests that hold them to it.
package apispec

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// Load returns the OpenAPI document at path. It fails t when the file
// does not load or is not a valid OpenAPI document.
func Load(t testing.TB, path string) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", path, err)
	}
	return doc
}
