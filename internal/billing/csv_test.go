package billing

import "testing"

func TestSafeCell(t *testing.T) {
	for in, want := range map[string]string{
		"GET /repos": "GET /repos", "=HYPERLINK(\"x\")": "'=HYPERLINK(\"x\")", "+1": "'+1", "-1": "'-1",
		"@SUM(A1)": "'@SUM(A1)", "\tx": "'\tx", "": "", "acme": "acme",
	} {
		if got := safeCell(in); got != want {
			t.Errorf("safeCell(%q) = %q, want %q", in, got, want)
		}
	}
}
