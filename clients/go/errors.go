package memevo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FieldViolation is one google.rpc.BadRequest field violation: which request field is wrong and why.
type FieldViolation struct {
	// Field is the path of the field, e.g. "memory.vector" or "memories[3].namespace".
	Field string
	// Description says what is wrong and what to send instead.
	Description string
}

// Error is every error a Client method returns for a failed call.
//
// Get at it with errors.As; compare its code with errors.Is against the sentinels
// (ErrInvalidArgument, ErrNotFound, ...). A retry of a mutating call is safe only when it carries
// a request id: the sidecar then returns the first call's result instead of writing twice.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the sidecar's message.
	Message string
	// FieldViolations come from google.rpc.BadRequest; empty when none were sent.
	FieldViolations []FieldViolation
	// Reason is the google.rpc.ErrorInfo reason (UPPER_SNAKE_CASE); empty when none was sent.
	Reason string
	// Domain is the google.rpc.ErrorInfo domain; empty when none was sent.
	Domain string
	// Metadata is the google.rpc.ErrorInfo metadata, e.g. "committed_count" after a failed RememberStream.
	Metadata map[string]string
	// RetryAfter is the google.rpc.RetryInfo delay; 0 when not given.
	RetryAfter time.Duration

	status *status.Status
}

// Sentinels for errors.Is: an *Error matches the sentinel of its code.
var (
	ErrInvalidArgument    = &Error{Code: codes.InvalidArgument}
	ErrNotFound           = &Error{Code: codes.NotFound}
	ErrAlreadyExists      = &Error{Code: codes.AlreadyExists}
	ErrFailedPrecondition = &Error{Code: codes.FailedPrecondition}
	ErrResourceExhausted  = &Error{Code: codes.ResourceExhausted}
	ErrUnavailable        = &Error{Code: codes.Unavailable}
	ErrDeadlineExceeded   = &Error{Code: codes.DeadlineExceeded}
	ErrCanceled           = &Error{Code: codes.Canceled}
	ErrUnauthenticated    = &Error{Code: codes.Unauthenticated}
	ErrPermissionDenied   = &Error{Code: codes.PermissionDenied}
	ErrUnimplemented      = &Error{Code: codes.Unimplemented}
	ErrInternal           = &Error{Code: codes.Internal}
)

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("memevo: ")
	b.WriteString(e.Code.String())
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if len(e.FieldViolations) > 0 {
		parts := make([]string, len(e.FieldViolations))
		for i, v := range e.FieldViolations {
			parts[i] = v.Field + ": " + v.Description
		}
		fmt.Fprintf(&b, " [%s]", strings.Join(parts, "; "))
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " (reason %s)", e.Reason)
	}
	return b.String()
}

// Is reports whether target is an *Error with the same code, so errors.Is(err, memevo.ErrNotFound) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Retryable is true for Unavailable, ResourceExhausted, DeadlineExceeded and Aborted.
func (e *Error) Retryable() bool {
	switch e.Code {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// GRPCStatus returns the status the error was built from, so status.FromError and status.Code keep working.
func (e *Error) GRPCStatus() *status.Status {
	if e.status != nil {
		return e.status
	}
	return status.New(e.Code, e.Message)
}

// FromError turns an error of a gRPC call into an *Error with the google.rpc details decoded.
// It returns nil for nil, and the error itself when it already is an *Error.
// Context errors become Canceled or DeadlineExceeded.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		switch {
		case errors.Is(err, context.Canceled):
			st = status.New(codes.Canceled, err.Error())
		case errors.Is(err, context.DeadlineExceeded):
			st = status.New(codes.DeadlineExceeded, err.Error())
		default:
			st = status.New(codes.Unknown, err.Error())
		}
	}
	out := &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				out.FieldViolations = append(out.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		case *errdetails.ErrorInfo:
			out.Reason, out.Domain = d.GetReason(), d.GetDomain()
			out.Metadata = d.GetMetadata()
		case *errdetails.RetryInfo:
			out.RetryAfter = d.GetRetryDelay().AsDuration()
		}
	}
	return out
}
