package checkvalidate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// Limits of the contract.
const (
	// ContractVersion is the contract this package validates; providers
	// must list it in contract_versions.
	ContractVersion = "sluice.checks.v1"
	// MaxMessageBytes bounds EvaluateResponse.message.
	MaxMessageBytes = 1024
	// MaxTolerations bounds the tolerations of one PodSetUpdate.
	MaxTolerations = 8
	// MaxAnnotationsBytes bounds the annotations (keys and values) of one
	// PodSetUpdate.
	MaxAnnotationsBytes = 256 * 1024
	// MaxEvaluationKeyBytes bounds the evaluation key of a request.
	MaxEvaluationKeyBytes = 512
)

// ProviderInfo checks a GetProviderInfo answer: a name that is a DNS
// subdomain, contract versions that include ContractVersion, and
// capabilities that are specified and not repeated. Capabilities this
// version does not know are allowed: a later v1 may add some.
func ProviderInfo(info *checksv1.GetProviderInfoResponse) error {
	if info == nil {
		return ErrorList{{Detail: "GetProviderInfo response is missing"}}
	}
	var c collector
	if info.GetName() == "" {
		c.add("name", "required")
	} else {
		c.check("name", DNSSubdomain(info.GetName()))
	}
	versions := info.GetContractVersions()
	switch {
	case len(versions) == 0:
		c.add("contract_versions", "required; must include %q", ContractVersion)
	case !slices.Contains(versions, ContractVersion):
		c.add("contract_versions", "must include %q, got %q", ContractVersion, versions)
	}
	for i, v := range versions {
		if v == "" {
			c.add(fmt.Sprintf("contract_versions[%d]", i), "must not be empty")
		}
	}
	seen := map[checksv1.Capability]bool{}
	for i, cp := range info.GetCapabilities() {
		path := fmt.Sprintf("capabilities[%d]", i)
		switch {
		case cp == checksv1.Capability_CAPABILITY_UNSPECIFIED:
			c.add(path, "CAPABILITY_UNSPECIFIED must not be sent")
		case seen[cp]:
			c.add(path, "%s is listed twice", cp)
		}
		seen[cp] = true
	}
	return c.err()
}

// EvaluateRequest checks what a provider needs to answer: an evaluation
// key of at most MaxEvaluationKeyBytes and a workload with namespace, name
// and uniquely named pod sets.
func EvaluateRequest(req *checksv1.EvaluateRequest) error {
	if req == nil {
		return ErrorList{{Detail: "Evaluate request is missing"}}
	}
	var c collector
	evaluationKey(&c, req.GetEvaluationKey())
	w := req.GetWorkload()
	if w == nil {
		c.add("workload", "required")
		return c.err()
	}
	if w.GetNamespace() == "" {
		c.add("workload.namespace", "required")
	}
	if w.GetName() == "" {
		c.add("workload.name", "required")
	}
	seen := map[string]int{}
	for i, ps := range w.GetPodSets() {
		path := fmt.Sprintf("workload.pod_sets[%d].name", i)
		if ps.GetName() == "" {
			c.add(path, "required")
			continue
		}
		if j, dup := seen[ps.GetName()]; dup {
			c.add(path, "%q is also the name of workload.pod_sets[%d]", ps.GetName(), j)
			continue
		}
		seen[ps.GetName()] = i
	}
	return c.err()
}

// ReleaseRequest checks that a Release names the evaluation key to free,
// of at most MaxEvaluationKeyBytes.
func ReleaseRequest(req *checksv1.ReleaseRequest) error {
	if req == nil {
		return ErrorList{{Detail: "Release request is missing"}}
	}
	var c collector
	evaluationKey(&c, req.GetEvaluationKey())
	return c.err()
}

func evaluationKey(c *collector, key string) {
	switch {
	case key == "":
		c.add("evaluation_key", "required")
	case len(key) > MaxEvaluationKeyBytes:
		c.add("evaluation_key", "must be at most %d bytes, got %d", MaxEvaluationKeyBytes, len(key))
	}
}

// EvaluateResponse checks a provider's answer to req, given the
// capabilities the provider advertised: a specified state, a reason and
// message that fit on a workload, a valid retry_after, and pod set updates
// only with READY, only from providers with CAPABILITY_POD_SET_UPDATES, at
// most one per pod set of req, each with valid keys and values outside the
// reserved prefixes. req may be nil to check the answer alone (pod set
// names are then not matched).
func EvaluateResponse(req *checksv1.EvaluateRequest, resp *checksv1.EvaluateResponse, caps []checksv1.Capability) error {
	if resp == nil {
		return ErrorList{{Detail: "Evaluate response is missing"}}
	}
	var c collector
	state := resp.GetState()
	switch {
	case state == checksv1.State_STATE_UNSPECIFIED:
		c.add("state", "required; STATE_UNSPECIFIED is not an answer")
	case checksv1.State_name[int32(state)] == "":
		c.add("state", "unknown state %d", state)
	}
	if r := resp.GetReason(); r != "" {
		c.check("reason", ConditionReason(r))
	}
	if n := len(resp.GetMessage()); n > MaxMessageBytes {
		c.add("message", "must be at most %d bytes, got %d", MaxMessageBytes, n)
	}
	if ra := resp.GetRetryAfter(); ra != nil {
		if err := ra.CheckValid(); err != nil {
			c.add("retry_after", "invalid duration: %v", err)
		} else if ra.AsDuration() < 0 {
			c.add("retry_after", "must not be negative, got %s", ra.AsDuration())
		}
	}
	updates := resp.GetPodSetUpdates()
	if len(updates) > 0 {
		if state != checksv1.State_STATE_READY {
			c.add("pod_set_updates", "only allowed with STATE_READY, got %s", state)
		}
		if !slices.Contains(caps, checksv1.Capability_CAPABILITY_POD_SET_UPDATES) {
			c.add("pod_set_updates", "refused: the provider does not advertise CAPABILITY_POD_SET_UPDATES")
		}
	}
	podSets := podSetNames(req)
	seen := map[string]int{}
	for i, u := range updates {
		path := fmt.Sprintf("pod_set_updates[%d]", i)
		name := u.GetName()
		switch {
		case name == "":
			c.add(path+".name", "required")
		case podSets != nil && !slices.Contains(podSets, name):
			c.add(path+".name", "%q is not a pod set of the workload (pod sets: %s)", name, strings.Join(podSets, ", "))
		default:
			if j, dup := seen[name]; dup {
				c.add(path+".name", "second update for pod set %q (first: pod_set_updates[%d]); at most one per pod set", name, j)
			}
			seen[name] = i
		}
		podSetUpdate(&c, path, u)
	}
	return c.err()
}

// PodSetUpdate checks the contents of one update (not its pod set name
// against a request); path prefixes the field paths in errors.
func PodSetUpdate(path string, u *checksv1.PodSetUpdate) error {
	var c collector
	podSetUpdate(&c, path, u)
	return c.err()
}

func podSetUpdate(c *collector, path string, u *checksv1.PodSetUpdate) {
	for _, k := range sortedKeys(u.GetLabels()) {
		p := fmt.Sprintf("%s.labels[%q]", path, k)
		checkKey(c, p, k, true)
		c.check(p, labelValue(u.GetLabels()[k]))
	}
	size := 0
	for _, k := range sortedKeys(u.GetAnnotations()) {
		checkKey(c, fmt.Sprintf("%s.annotations[%q]", path, k), k, true)
		size += len(k) + len(u.GetAnnotations()[k])
	}
	if size > MaxAnnotationsBytes {
		c.add(path+".annotations", "must be at most %d bytes in all, got %d", MaxAnnotationsBytes, size)
	}
	for _, k := range sortedKeys(u.GetNodeSelector()) {
		p := fmt.Sprintf("%s.node_selector[%q]", path, k)
		checkKey(c, p, k, false)
		c.check(p, labelValue(u.GetNodeSelector()[k]))
	}
	tols := u.GetTolerations()
	if len(tols) > MaxTolerations {
		c.add(path+".tolerations", "at most %d allowed, got %d", MaxTolerations, len(tols))
	}
	for i, t := range tols {
		toleration(c, fmt.Sprintf("%s.tolerations[%d]", path, i), t)
	}
}

func checkKey(c *collector, path, key string, reservedRefused bool) {
	if err := QualifiedName(key); err != nil {
		c.add(path, "invalid key: %v", err)
		return
	}
	if reservedRefused && IsReserved(key) {
		c.add(path, "key is under a reserved prefix (%s)", strings.Join(ReservedPrefixes(), ", "))
	}
}

func labelValue(v string) error {
	if err := LabelValue(v); err != nil {
		return fmt.Errorf("invalid value: %w", err)
	}
	return nil
}

func toleration(c *collector, path string, t *checksv1.Toleration) {
	op := t.GetOperator()
	exists := op == checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS
	if checksv1.TolerationOperator_name[int32(op)] == "" {
		c.add(path+".operator", "unknown operator %d", op)
	}
	if t.GetKey() == "" {
		if !exists {
			c.add(path+".key", "required unless operator is TOLERATION_OPERATOR_EXISTS")
		}
	} else if err := QualifiedName(t.GetKey()); err != nil {
		c.add(path+".key", "invalid key: %v", err)
	}
	if exists {
		if t.GetValue() != "" {
			c.add(path+".value", "must be empty with TOLERATION_OPERATOR_EXISTS, got %q", t.GetValue())
		}
	} else {
		c.check(path+".value", labelValue(t.GetValue()))
	}
	effect := t.GetEffect()
	if checksv1.TaintEffect_name[int32(effect)] == "" {
		c.add(path+".effect", "unknown effect %d", effect)
	}
	if t.TolerationSeconds != nil && effect != checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE {
		c.add(path+".toleration_seconds", "only allowed with TAINT_EFFECT_NO_EXECUTE, got %s", effect)
	}
}

func podSetNames(req *checksv1.EvaluateRequest) []string {
	if req == nil {
		return nil
	}
	names := []string{}
	for _, ps := range req.GetWorkload().GetPodSets() {
		names = append(names, ps.GetName())
	}
	return names
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
