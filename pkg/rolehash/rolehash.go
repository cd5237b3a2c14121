// Package rolehash computes the role hash of a pod: a short digest of the
// parts of its spec that matter for admission and scheduling. Pods of a group
// whose hashes are equal are interchangeable and share one pod set.
package rolehash

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Length is the number of hex characters in a role hash.
const Length = 8

// Compute returns the role hash of spec: the first Length lowercase hex
// characters of the SHA-256 of Canonical(spec).
func Compute(spec *corev1.PodSpec) (string, error) {
	data, err := Canonical(spec)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:Length], nil
}

// Canonical returns the bytes the role hash is computed over: the JSON of
// the spec's shape, with sorted keys and every shape key present (null when
// unset), so that an unset field and an empty one hash differently and the
// result does not depend on struct field order or omitempty tags.
//
// The shape keeps, per init and regular container, only resources.requests
// and ports; and of the pod spec nodeSelector, affinity, tolerations,
// runtimeClassName, priority, topologySpreadConstraints, overhead,
// resourceClaims, and the pod-level resources when they are set. Names,
// images, env, commands, volumes and all metadata may differ between pods of
// one role.
func Canonical(spec *corev1.PodSpec) ([]byte, error) {
	if spec == nil {
		return nil, errors.New("role hash: pod spec is nil")
	}
	shape := map[string]any{
		"initContainers":            containerShapes(spec.InitContainers),
		"containers":                containerShapes(spec.Containers),
		"nodeSelector":              spec.NodeSelector,
		"affinity":                  spec.Affinity,
		"tolerations":               spec.Tolerations,
		"runtimeClassName":          spec.RuntimeClassName,
		"priority":                  spec.Priority,
		"topologySpreadConstraints": spec.TopologySpreadConstraints,
		"overhead":                  spec.Overhead,
		"resourceClaims":            spec.ResourceClaims,
	}
	if spec.Resources != nil {
		shape["resources"] = spec.Resources
	}
	// encoding/json writes map keys in sorted order, and the nested API
	// types marshal deterministically; round-tripping through a generic value
	// sorts the keys of the nested structs too.
	raw, err := json.Marshal(map[string]any{"spec": shape})
	if err != nil {
		return nil, fmt.Errorf("role hash: encode pod shape: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep integers such as tolerationSeconds exact
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, fmt.Errorf("role hash: normalise pod shape: %w", err)
	}
	out, err := json.Marshal(generic)
	if err != nil {
		return nil, fmt.Errorf("role hash: encode normalised pod shape: %w", err)
	}
	return out, nil
}

// containerShapes keeps the scheduling-relevant part of each container. A
// nil list stays nil so that it encodes as null.
func containerShapes(containers []corev1.Container) []map[string]any {
	if containers == nil {
		return nil
	}
	shapes := make([]map[string]any, 0, len(containers))
	for i := range containers {
		c := &containers[i]
		shapes = append(shapes, map[string]any{
			"ports":     c.Ports,
			"resources": map[string]any{"requests": c.Resources.Requests},
		})
	}
	return shapes
}
