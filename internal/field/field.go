// Package field is the structured form of a configuration mistake: the
// path of the field at fault and what is wrong with it. The stages
// (shedder, concurrency) report a bad Config this way, and the policy
// file's loader finds the line of the field from the path alone, without
// reading the message.
//
// A path names fields by their keys in the policy file (the snake_case of
// the Go field names), joined by dots and relative to the struct that was
// checked: "adaptive.max" in a shedder.Config. It imports nothing of
// floodgate.
package field

import (
	"errors"
	"fmt"
)

// Error is a mistake in the field at Path.
type Error struct {
	// Path is the field's dotted key path, relative to the struct checked.
	Path string
	// Err says what is wrong, in words that name other fields by key.
	Err error
}

// Errorf returns an *Error at path whose Err is fmt.Errorf(format, args...).
func Errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// Error returns "path: err".
func (e *Error) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Under returns e with parent put before its path ("adaptive" and "max"
// give "adaptive.max").
func (e *Error) Under(parent string) *Error {
	return &Error{Path: parent + "." + e.Path, Err: e.Err}
}

// Split returns the *Errors in err, which is one error or a join of them
// (errors.Join), each possibly wrapped, and the errors that carry none.
func Split(err error) (fields []*Error, other []error) {
	if err == nil {
		return nil, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var fe *Error
		if errors.As(e, &fe) {
			fields = append(fields, fe)
		} else {
			other = append(other, e)
		}
	}
	return fields, other
}
