package ui

import "testing"

// TestTemplatesParse parses every page (New panics on a template that does
// not parse) and checks that each page defines its content.
func TestTemplatesParse(t *testing.T) {
	c := New(Config{})
	for name, tmpl := range c.pages {
		if tmpl.Lookup("content") == nil {
			t.Errorf("page %s defines no content", name)
		}
		if tmpl.Lookup("pager") == nil {
			t.Errorf("page %s lacks the partials", name)
		}
	}
}
