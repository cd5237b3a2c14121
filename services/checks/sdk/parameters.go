package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// ParameterSource is a request that carries an AdmissionCheck's
// parameters: *checksv1.EvaluateRequest and *checksv1.ReleaseRequest.
type ParameterSource interface {
	GetParameters() *structpb.Struct
}

// DecodeParameters decodes the request's parameters into v (a pointer to a
// struct with json tags), as encoding/json would decode the AdmissionCheck's
// spec.parameters. Unknown fields are refused, so a typo in an
// AdmissionCheck is reported instead of ignored. Errors are
// INVALID_ARGUMENT and name the field, for example
// `parameters.nodeLabels: expected object, got number`. Absent parameters
// leave v as it is.
func DecodeParameters(req ParameterSource, v any) error {
	p := req.GetParameters()
	if p == nil {
		return nil
	}
	raw, err := protojson.Marshal(p)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "parameters: cannot encode as JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return status.Error(codes.InvalidArgument, describeDecodeError(err))
	}
	return nil
}

// InvalidParameter returns the INVALID_ARGUMENT error for a parameter that
// decodes but breaks a rule; field is its JSON path below parameters.
func InvalidParameter(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "parameters.%s: %s", field, fmt.Sprintf(format, args...))
}

func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := "parameters"
		if typeErr.Field != "" {
			field += "." + typeErr.Field
		}
		return fmt.Sprintf("%s: expected %s, got %s", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Sprintf("parameters: unknown field %s", name)
	}
	return fmt.Sprintf("parameters: %v", err)
}

// jsonKind names a Go kind the way an AdmissionCheck author thinks of it.
func jsonKind(goKind string) string {
	switch goKind {
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	}
	return goKind
}
