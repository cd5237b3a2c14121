package checkvalidate

import (
	"fmt"
	"strings"
)

// FieldError is one broken rule, at a field path such as
// `pod_set_updates[0].tolerations[1].value`.
type FieldError struct {
	Path   string
	Detail string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Detail
	}
	return e.Path + ": " + e.Detail
}

// ErrorList is every broken rule of one message, in field order. Its
// message joins them with "; " so that it fits on one status line.
type ErrorList []*FieldError

func (l ErrorList) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// collector gathers FieldErrors while a message is walked.
type collector struct {
	errs ErrorList
}

func (c *collector) add(path, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Path: path, Detail: fmt.Sprintf(format, args...)})
}

func (c *collector) check(path string, err error) {
	if err != nil {
		c.errs = append(c.errs, &FieldError{Path: path, Detail: err.Error()})
	}
}

// err returns nil for no errors, so that callers can compare with nil.
func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs
}
