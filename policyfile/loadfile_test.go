package policyfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/tiers"
)

// TestLoadFileNamesTheFile: an error names the file, then each problem
// with its line, and still unwraps to the *tiers.PolicyError; a missing
// file unwraps to os.ErrNotExist.
func TestLoadFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: a\n    rate: 5/minute\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := policyfile.LoadFile(path)
	want := path + ":\n" + `rules[0].rate: "5/minute" is not N/duration (write 5/1m), at line 3`
	if err == nil || err.Error() != want {
		t.Fatalf("policyfile.LoadFile error = %v, want %s", err, want)
	}
	var pe *tiers.PolicyError
	if !errors.As(err, &pe) {
		t.Errorf("policyfile.LoadFile error does not wrap a *PolicyError")
	}
	if _, err := policyfile.LoadFile(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadFile(missing) = %v, want an error wrapping os.ErrNotExist", err)
	}
}
