package field_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/floodgate-go/floodgate/internal/field"
)

func TestSplit(t *testing.T) {
	a := field.Errorf("max", "%d must be >= min %d", 5, 10).Under("adaptive")
	other := errors.New("no path")
	fields, rest := field.Split(errors.Join(fmt.Errorf("shedder: Config: %w", a), other))
	if len(fields) != 1 || fields[0].Path != "adaptive.max" || fields[0].Err.Error() != "5 must be >= min 10" {
		t.Fatalf("fields %+v", fields)
	}
	if len(rest) != 1 || rest[0] != other {
		t.Fatalf("other %v", rest)
	}
	if f, o := field.Split(nil); f != nil || o != nil {
		t.Fatal("Split(nil) found errors")
	}
}
