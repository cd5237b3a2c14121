// Package handler serves the webhook's admission endpoints: the mutating
// ones mark new pods sluice queues (one for pods that name a queue, one for
// every pod of a namespace that opted in to queue defaulting), the
// validating one refuses bad queueing keys on update and unqueued pods
// that carry sluice's managed label. All read their surroundings through
// Lookup and keep no state between requests.
package handler

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/webhook/internal/metrics"
	"github.com/sluice-dev/sluice/services/webhook/internal/mutate"
	"github.com/sluice-dev/sluice/services/webhook/internal/validate"
)

// Paths the handlers are served on.
const (
	MutatePath   = "/mutate-pods"
	DefaultPath  = "/default-pods"
	ValidatePath = "/validate-pods"
)

// SpanName is the name of the span that starts each queued pod's trace.
const SpanName = "webhook.admit"

// traceparentKey is the W3C header the trace context travels in.
const traceparentKey = "traceparent"

// Lookup answers questions about a pod's surroundings from caches.
type Lookup interface {
	NamespaceManaged(ctx context.Context, namespace string) (bool, error)
	DefaultQueueExists(ctx context.Context, namespace string) (bool, error)
	// DeclaredGroup tells what the webhook has seen of a declared group,
	// for judging a new pod of role in it (see validate.Worker).
	DeclaredGroup(ctx context.Context, namespace, group, role string) (validate.Group, error)
	// GroupRuns reports whether a pod of a group runs (see mutate.Runs),
	// as far as the webhook has seen.
	GroupRuns(ctx context.Context, namespace, group string) (bool, error)
	// PriorityClassExists reports whether a WorkloadPriorityClass exists.
	PriorityClassExists(ctx context.Context, name string) (bool, error)
}

func newDecoder() (admission.Decoder, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build pod scheme: %w", err)
	}
	return admission.NewDecoder(scheme), nil
}

// Mutator marks new pods that sluice queues.
type Mutator struct {
	// gang links the pods of KEP-976 groups to their group's PodGroup.
	gang bool
	// leftToKueue returns the controller kinds whose pods are Kueue's,
	// under the owners preset in effect now; nil leaves none.
	leftToKueue func() []schema.GroupKind
	lookup      Lookup
	metrics     *metrics.Metrics
	tracer      trace.Tracer
	propagator  propagation.TextMapPropagator
	decoder     admission.Decoder
}

// MutatorOption tunes a Mutator.
type MutatorOption func(*Mutator)

// WithGangScheduling makes the Mutator set spec.schedulingGroup on the
// pods of KEP-976 groups created beforehand (see mutate.SchedulingGroup),
// so that kube-scheduler binds each such group all-or-nothing through the
// PodGroup the grouper creates for it.
func WithGangScheduling(on bool) MutatorOption {
	return func(m *Mutator) { m.gang = on }
}

// WithLeftToKueue makes the Mutator leave alone the pods whose controller
// is of a kind kinds returns at the time of the request (see
// mutate.Decide); it is read per request because the owners preset can
// change while the webhook runs (--owners=auto).
func WithLeftToKueue(kinds func() []schema.GroupKind) MutatorOption {
	return func(m *Mutator) { m.leftToKueue = kinds }
}

// NewMutator returns the mutating handler. The tracer and propagator are
// normally otel's globals, set up by pkg/telemetry.
func NewMutator(l Lookup, m *metrics.Metrics, tracer trace.Tracer, propagator propagation.TextMapPropagator, opts ...MutatorOption) (*Mutator, error) {
	dec, err := newDecoder()
	if err != nil {
		return nil, err
	}
	h := &Mutator{lookup: l, metrics: m, tracer: tracer, propagator: propagator, decoder: dec}
	for _, o := range opts {
		o(h)
	}
	return h, nil
}

// Handle answers one admission request for a pod CREATE sent to MutatePath:
// the pod is queued only if it names a queue.
func (h *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return h.handle(ctx, req, false)
}

// defaulting serves DefaultPath: the API server sends it the pods of the
// namespaces that opted in to queue defaulting (the webhook entry's
// namespaceSelector), and a pod there that names no queue goes to
// mutate.DefaultQueue.
type defaulting struct{ *Mutator }

func (d defaulting) Handle(ctx context.Context, req admission.Request) admission.Response {
	return d.handle(ctx, req, true)
}

// handle marks a new pod sluice queues; mayDefault says the namespace
// opted in to queue defaulting.
func (h *Mutator) handle(ctx context.Context, req admission.Request, mayDefault bool) admission.Response {
	defer h.metrics.ObserveSince(metrics.Mutating, time.Now())
	if req.Operation != admissionv1.Create {
		return admission.Allowed("sluice only marks pods at creation")
	}
	pod, done := managedPod(ctx, h.lookup, h.decoder, req)
	if done != nil {
		return *done
	}
	// A reinvocation (another mutating webhook changed the pod after ours)
	// finds the pod marked by the first invocation: its trace context stays
	// as it is, and the patch only restores marks another webhook may have
	// removed.
	reinvoked := markedEarlier(ctx, pod)
	// CREATE is validated here rather than by the validating webhook: one
	// round trip per pod instead of two. The mutating webhook is reinvoked
	// when a later mutating webhook changes the pod, so the final object is
	// still validated. Only here can sluice's own trace context be told from
	// one the user wrote.
	errs, err := validateCreate(ctx, h.lookup, pod, reinvoked)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	var defaultExists func() (bool, error)
	if mayDefault {
		defaultExists = func() (bool, error) { return h.lookup.DefaultQueueExists(ctx, req.Namespace) }
	}
	var leftToKueue []schema.GroupKind
	if h.leftToKueue != nil {
		leftToKueue = h.leftToKueue()
	}
	decision, err := mutate.Decide(pod, leftToKueue, defaultExists)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	queueingErrs, err := validateQueueing(ctx, h.lookup, pod, decision.Managed())
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if errs = append(errs, queueingErrs...); len(errs) > 0 {
		return denied(h.metrics, pod, errs)
	}
	if !decision.Managed() {
		if decision.LeftToKueue {
			return admission.Allowed("the pod's controller is queued by Kueue")
		}
		return admission.Allowed("pod names no queue")
	}

	traceparent := pod.Annotations[podkeys.TraceparentAnnotation]
	if !reinvoked {
		if traceparent, err = h.startTrace(ctx, req, pod, decision); err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
	}
	ops, err := mutate.Patch(pod, decision, traceparent)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if h.gang {
		link, err := h.gangLink(ctx, pod)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		ops = append(ops, link...)
	}
	if !reinvoked && (req.DryRun == nil || !*req.DryRun) {
		h.metrics.PodGated()
	}
	logf.FromContext(ctx).V(2).Info("gating pod", "namespace", req.Namespace, "queue", decision.Queue, "defaulted", decision.Defaulted, "reinvoked", reinvoked)
	return admission.Patched("", ops...)
}

// gangLink returns the patch linking pod to its group's PodGroup (see
// mutate.SchedulingGroup) — unless its group already runs (one of its pods
// Runs): a pod created then replaces one that failed, and kube-scheduler,
// which counts only the gang's pods that are not finished, would hold it
// for a gang that never completes again. It binds alone, as a replacement
// does without a gang.
func (h *Mutator) gangLink(ctx context.Context, pod *corev1.Pod) ([]jsonpatch.JsonPatchOperation, error) {
	link := mutate.SchedulingGroup(pod)
	if len(link) == 0 {
		return nil, nil
	}
	group := pod.Labels[podkeys.PodGroupNameLabel]
	runs, err := h.lookup.GroupRuns(ctx, pod.Namespace, group)
	if err != nil {
		return nil, fmt.Errorf("look up whether group %s runs: %w", group, err)
	}
	if runs {
		logf.FromContext(ctx).V(2).Info("group runs already: no gang for the new pod", "namespace", pod.Namespace, "group", group)
		return nil, nil
	}
	return link, nil
}

// markedEarlier tells whether an earlier invocation of this webhook for the
// same request marked the pod, i.e. this call is a reinvocation. A user can
// write any key, so the pod must carry every mark the first invocation
// always leaves and no other webhook has reason to remove: a queue, the
// managed label, a role hash and a well-formed trace context. When the API
// server sent the request's trace context (ctx, see Webhook), the stamped
// one must belong to that trace too, which a user cannot forge beyond
// choosing the trace they send with the request themselves. The gate and
// the finalizer are no marks: another webhook may remove them, and the
// patch restores them.
func markedEarlier(ctx context.Context, pod *corev1.Pod) bool {
	_, queued := pod.Labels[podkeys.QueueNameLabel]
	if !queued || pod.Labels[podkeys.ManagedLabel] != podkeys.ManagedLabelValue || pod.Annotations[podkeys.RoleHashAnnotation] == "" {
		return false
	}
	stamped := parseTraceparent(pod.Annotations[podkeys.TraceparentAnnotation])
	if !stamped.IsValid() {
		return false
	}
	request := trace.SpanContextFromContext(ctx)
	return !request.IsValid() || request.TraceID() == stamped.TraceID()
}

// parseTraceparent reads a W3C trace context; it is invalid when the text
// is not one.
func parseTraceparent(text string) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceparentKey: text})
	return trace.SpanContextFromContext(ctx)
}

// Webhook returns the Mutator as an admission webhook to serve. Each request
// carries in its context the W3C trace context of the HTTP request that
// delivered it, which kube-apiserver sets to the create request's trace:
// its own span's where its tracing is configured, the client's otherwise.
// controller-runtime hands the handler the HTTP request's own context,
// which holds no trace.
func (h *Mutator) Webhook() *admission.Webhook {
	return &admission.Webhook{Handler: h, WithContextFunc: h.requestTraceContext}
}

// DefaultingWebhook is Webhook for DefaultPath: it also queues the pods
// that name no queue on mutate.DefaultQueue, when that LocalQueue exists.
func (h *Mutator) DefaultingWebhook() *admission.Webhook {
	return &admission.Webhook{Handler: defaulting{h}, WithContextFunc: h.requestTraceContext}
}

// requestTraceContext adds the trace context of r's headers to ctx.
func (h *Mutator) requestTraceContext(ctx context.Context, r *http.Request) context.Context {
	return h.propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
}

// startTrace starts the span that roots the pod's trace and returns its W3C
// trace context. The span continues the trace of the admission request when
// ctx carries one (see Webhook), and starts a new trace otherwise. When
// tracing is off the pod still gets a trace context (the request's, or a
// fresh unsampled one), so every service can correlate the workload's logs
// by one trace ID.
func (h *Mutator) startTrace(ctx context.Context, req admission.Request, pod *corev1.Pod, d mutate.Decision) (string, error) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("k8s.namespace.name", req.Namespace),
			attribute.String("k8s.pod.name", podName(pod)),
			attribute.String("sluice.queue", d.Queue),
		),
	}
	ctx, span := h.tracer.Start(ctx, SpanName, opts...)
	defer span.End()

	carrier := propagation.MapCarrier{}
	h.propagator.Inject(ctx, carrier)
	if tp := carrier.Get(traceparentKey); tp != "" {
		return tp, nil
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		fresh, err := randomSpanContext()
		if err != nil {
			return "", err
		}
		sc = fresh
	}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(ctx, sc), carrier)
	return carrier.Get(traceparentKey), nil
}

func randomSpanContext() (trace.SpanContext, error) {
	var tid trace.TraceID
	var sid trace.SpanID
	if _, err := rand.Read(tid[:]); err != nil {
		return trace.SpanContext{}, fmt.Errorf("generate trace id: %w", err)
	}
	if _, err := rand.Read(sid[:]); err != nil {
		return trace.SpanContext{}, fmt.Errorf("generate span id: %w", err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}), nil
}

// Validator refuses pods whose queueing keys break sluice's rules.
type Validator struct {
	lookup  Lookup
	metrics *metrics.Metrics
	decoder admission.Decoder
}

// NewValidator returns the validating handler.
func NewValidator(l Lookup, m *metrics.Metrics) (*Validator, error) {
	dec, err := newDecoder()
	if err != nil {
		return nil, err
	}
	return &Validator{lookup: l, metrics: m, decoder: dec}, nil
}

// Handle answers one admission request for a pod UPDATE (CREATE of a
// queued pod is validated by the Mutator). A CREATE sent here is of a pod
// that names no queue yet carries the managed label (see
// registration.Validating); it is validated all the same, and refused.
func (h *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	defer h.metrics.ObserveSince(metrics.Validating, time.Now())
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	pod, done := managedPod(ctx, h.lookup, h.decoder, req)
	if done != nil {
		return *done
	}
	var errs field.ErrorList
	if req.Operation == admissionv1.Create {
		// The pod has passed sluice's mutating webhooks, which stamp the
		// trace context on the pods they queue; any other sluice.dev/ key
		// is the user's. They queue every pod that names a queue, and
		// defaulting gives one to every pod it queues.
		_, queued := pod.Labels[podkeys.QueueNameLabel]
		var err error
		if errs, err = validateCreate(ctx, h.lookup, pod, queued); err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		queueingErrs, err := validateQueueing(ctx, h.lookup, pod, queued)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		errs = append(errs, queueingErrs...)
	} else {
		old := &corev1.Pod{}
		if err := h.decoder.DecodeRaw(req.OldObject, old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode old pod: %w", err))
		}
		errs = validate.Update(old, pod)
	}
	if len(errs) == 0 {
		return admission.Allowed("")
	}
	return denied(h.metrics, pod, errs)
}

// validateCreate judges a new pod's keys and, for a worker of a declared
// group, whether its group has room for it. traceStamped allows the
// sluice.dev/ trace context (see validate.SluiceKeys).
func validateCreate(ctx context.Context, l Lookup, pod *corev1.Pod, traceStamped bool) (field.ErrorList, error) {
	if errs := append(validate.Create(pod), validate.SluiceKeys(pod, traceStamped)...); len(errs) > 0 {
		return errs, nil
	}
	group, inGroup := pod.Labels[podkeys.PodGroupNameLabel]
	role, hasRole := pod.Labels[podkeys.PodGroupRoleLabel]
	if !inGroup || !hasRole {
		return nil, nil
	}
	seen, err := l.DeclaredGroup(ctx, pod.Namespace, group, role)
	if err != nil {
		return nil, fmt.Errorf("look up group %s: %w", group, err)
	}
	return validate.Worker(pod, seen), nil
}

// validateQueueing judges the keys of a new pod whose rules depend on
// whether sluice queues it: a queued pod's keys that matter only then,
// with the WorkloadPriorityClass it names looked up (validate.Queued); an
// unqueued pod's managed label, which it may not carry
// (validate.Unqueued).
func validateQueueing(ctx context.Context, l Lookup, pod *corev1.Pod, queued bool) (field.ErrorList, error) {
	if !queued {
		return validate.Unqueued(pod), nil
	}
	return validate.Queued(pod, func(name string) (bool, error) { return l.PriorityClassExists(ctx, name) })
}

// managedPod decodes the request's pod when its namespace is managed by
// sluice. Otherwise, or on failure, it returns the response to send.
func managedPod(ctx context.Context, l Lookup, dec admission.Decoder, req admission.Request) (*corev1.Pod, *admission.Response) {
	managed, err := l.NamespaceManaged(ctx, req.Namespace)
	if err != nil {
		resp := admission.Errored(http.StatusInternalServerError, err)
		return nil, &resp
	}
	if !managed {
		resp := admission.Allowed("namespace is not managed by sluice")
		return nil, &resp
	}
	pod := &corev1.Pod{}
	if err := dec.Decode(req, pod); err != nil {
		resp := admission.Errored(http.StatusBadRequest, fmt.Errorf("decode pod: %w", err))
		return nil, &resp
	}
	if pod.Namespace == "" {
		// A create may leave it to the request; the API server fills it in
		// after admission.
		pod.Namespace = req.Namespace
	}
	return pod, nil
}

// denied refuses the request with a standard Invalid status, so clients see
// the reason and one cause per broken rule, as for the API server's own
// validation.
func denied(m *metrics.Metrics, pod *corev1.Pod, errs field.ErrorList) admission.Response {
	for _, e := range errs {
		m.PodRejected(validate.Reason(e))
	}
	status := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, podName(pod), errs).ErrStatus
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
}

// podName names a pod for messages, falling back to its name prefix while
// the API server has not generated the name yet.
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName
}
