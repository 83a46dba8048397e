// gracekeeper-peer: the lean peer of test/bench/operator-bench. The same job
// as `gracekeeper run` for the benchmark's workload, written as a
// controller-runtime operator the way a Go team would write it: a manager, a
// cached client, one controller For Deployments that also Watches
// ShutdownPolicies (unstructured), typed server-side apply configurations.
//
// For each Deployment opted in (annotation or label gracekeeper.dev/enabled
// "true") it picks the namespace's ShutdownPolicy, computes what gracekeeper
// computes (preStop = clamp(ceil(safetyFactor * staticSeconds)), grace =
// wait + drain + sidecar drain + reserve, RollingUpdate maxUnavailable 0),
// skips the Deployment when it is compliant, and otherwise sends one
// server-side apply with its own field manager (gracekeeper-peer) holding
// the same fields as gracekeeper's apply configuration, including the
// gracekeeper.dev/applied record; forced when no other applier owns fields
// of it, as gracekeeper forces. It writes no Events and no status.
//
// It covers the policy fields the benchmark uses (Static propagation, Auto or
// Sleep preStop, Keep or Replace for hand-written hooks, the churn interval);
// it is a benchmark peer, not a second implementation of gracekeeper.
//
// Flags: --kubeconfig (controller-runtime's), --qps / --burst (the client's
// rate limit; the default -1 is controller-runtime's: no client-side limit),
// --workers (MaxConcurrentReconciles, default 1 as in controller-runtime),
// --user-agent, --metrics-bind-address / --health-probe-bind-address ("0":
// off, the default).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/zapr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	fieldManager  = "gracekeeper-peer"
	annEnabled    = "gracekeeper.dev/enabled"
	annApplied    = "gracekeeper.dev/applied"
	annPolicy     = "gracekeeper.dev/policy"
	annContainers = "gracekeeper.dev/containers"
	annDrain      = "gracekeeper.dev/drain-seconds"
)

var policyGVK = schema.GroupVersionKind{Group: "gracekeeper.dev", Version: "v1alpha1", Kind: "ShutdownPolicy"}

// policySpec: the ShutdownPolicy spec fields the peer reads, with the defaults of docs/api.md ("ShutdownPolicy spec").
type policySpec struct {
	Mode        string                `json:"mode"`
	Selector    *metav1.LabelSelector `json:"selector"`
	Propagation struct {
		Source        string  `json:"source"`
		StaticSeconds float64 `json:"staticSeconds"`
		SafetyFactor  float64 `json:"safetyFactor"`
	} `json:"propagation"`
	PreStop struct {
		MinSeconds int64  `json:"minSeconds"`
		MaxSeconds int64  `json:"maxSeconds"`
		Action     string `json:"action"`
		Existing   string `json:"existing"`
	} `json:"preStop"`
	DrainSeconds        int64 `json:"drainSeconds"`
	SidecarDrainSeconds int64 `json:"sidecarDrainSeconds"`
	ReserveSeconds      int64 `json:"reserveSeconds"`
	Rollout             struct {
		Manage   bool               `json:"manage"`
		MaxSurge intstr.IntOrString `json:"maxSurge"`
	} `json:"rollout"`
	Changes struct {
		MinIntervalSeconds       int64 `json:"minIntervalSeconds"`
		DecreaseThresholdSeconds int64 `json:"decreaseThresholdSeconds"`
	} `json:"changes"`
}

func defaultSpec() policySpec {
	var s policySpec
	s.Mode = "Enforce"
	s.Propagation.Source = "Static"
	s.Propagation.StaticSeconds = 10
	s.Propagation.SafetyFactor = 1.5
	s.PreStop.MinSeconds, s.PreStop.MaxSeconds = 5, 60
	s.PreStop.Action, s.PreStop.Existing = "Auto", "Keep"
	s.DrainSeconds, s.ReserveSeconds = 30, 10
	s.Rollout.Manage = true
	s.Rollout.MaxSurge = intstr.FromInt32(1)
	s.Changes.MinIntervalSeconds, s.Changes.DecreaseThresholdSeconds = 3600, 2
	return s
}

// appliedRecord: the gracekeeper.dev/applied annotation, as gracekeeper writes it.
type appliedRecord struct {
	Policy      string    `json:"policy"`
	PreStop     int64     `json:"preStop"`
	Grace       int64     `json:"grace"`
	GraceOwned  bool      `json:"graceOwned"`
	Propagation jsonFloat `json:"propagation"`
	Containers  []string  `json:"containers"`
	Time        string    `json:"time"`
}

// jsonFloat: a double as gracekeeper's JSON writes it (4 -> 4.0), so that the
// record is byte for byte the same.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	s := strconv.FormatFloat(float64(f), 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return []byte(s), nil
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseFloat(string(b), 64)
	*f = jsonFloat(v)
	return err
}

type hookKind int

const (
	hookNone hookKind = iota
	hookSleep
	hookExecSleep
	hookOther
)

type hook struct {
	kind    hookKind
	seconds *int64
	owned   bool
}

func readHook(c *corev1.Container) hook {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return hook{}
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		s := h.Sleep.Seconds
		return hook{kind: hookSleep, seconds: &s}
	case h.Exec != nil && len(h.Exec.Command) == 2 && (h.Exec.Command[0] == "sleep" || strings.HasSuffix(h.Exec.Command[0], "/sleep")):
		if s, err := strconv.ParseInt(h.Exec.Command[1], 10, 64); err == nil {
			return hook{kind: hookExecSleep, seconds: &s}
		}
	}
	return hook{kind: hookOther}
}

func countedWait(h hook, budget int64) int64 {
	if h.kind == hookNone {
		return 0
	}
	if h.seconds != nil {
		return *h.seconds
	}
	return budget
}

type containerPlan struct {
	name     string
	seconds  int64
	set      bool // a new hook goes in
	ours     bool // in the apply configuration (gracekeeper's hook)
	native   bool // the sleep action, else exec sleep
	keptForm hookKind
}

type plan struct {
	changed        bool
	broken         bool
	grace          int64
	graceOwned     bool
	containers     []containerPlan
	manageStrategy bool
	strategy       appsv1.DeploymentStrategy
	propagation    float64
}

func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return false // the server defaults it to 25%
	}
	if v.Type == intstr.Int {
		return v.IntVal == 0
	}
	p := strings.TrimSuffix(v.StrVal, "%")
	n, err := strconv.Atoi(p)
	return err == nil && n == 0
}

func surges(v *intstr.IntOrString, replicas int32) bool {
	if v == nil {
		return true
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, int(replicas), true)
	return err == nil && n >= 1
}

// computePlan: what gracekeeper's planner decides for this Deployment, for the
// policy fields above.
func computePlan(d *appsv1.Deployment, spec *policySpec, nativeSleep bool, now time.Time) (plan, time.Duration) {
	p := plan{propagation: spec.Propagation.StaticSeconds}
	raw := math.Ceil(spec.Propagation.SafetyFactor*spec.Propagation.StaticSeconds - 1e-9)
	preStop := min(max(int64(raw), spec.PreStop.MinSeconds), spec.PreStop.MaxSeconds)
	drain := spec.DrainSeconds
	if v, ok := d.Annotations[annDrain]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			drain = n
		}
	}
	extra := drain + spec.SidecarDrainSeconds + spec.ReserveSeconds

	var rec *appliedRecord
	if text, ok := d.Annotations[annApplied]; ok {
		var r appliedRecord
		if json.Unmarshal([]byte(text), &r) == nil {
			rec = &r
		}
	}
	podSpec := &d.Spec.Template.Spec
	// Targets: the annotation's containers, else those with ports, else all.
	var targets []int
	if v, ok := d.Annotations[annContainers]; ok {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			for i := range podSpec.Containers {
				if podSpec.Containers[i].Name == name {
					targets = append(targets, i)
				}
			}
		}
	} else {
		for i := range podSpec.Containers {
			if len(podSpec.Containers[i].Ports) > 0 {
				targets = append(targets, i)
			}
		}
		if len(targets) == 0 {
			for i := range podSpec.Containers {
				targets = append(targets, i)
			}
		}
	}
	hooks := make([]hook, len(podSpec.Containers))
	for i := range podSpec.Containers {
		h := readHook(&podSpec.Containers[i])
		if rec != nil && slices.Contains(rec.Containers, podSpec.Containers[i].Name) &&
			(h.kind == hookSleep || h.kind == hookExecSleep) && h.seconds != nil && *h.seconds == rec.PreStop {
			h.owned = true
		}
		hooks[i] = h
	}
	grace := int64(30)
	if podSpec.TerminationGracePeriodSeconds != nil {
		grace = *podSpec.TerminationGracePeriodSeconds
	}

	// The state as it is: is the budget broken?
	var currentWait int64
	for _, i := range targets {
		h := hooks[i]
		currentWait = max(currentWait, countedWait(h, preStop))
		if (h.kind == hookNone && len(podSpec.Containers[i].Ports) > 0) ||
			(h.owned && h.seconds != nil && *h.seconds < preStop) {
			p.broken = true
		}
	}
	if currentWait+extra > grace {
		p.broken = true
	}
	st := d.Spec.Strategy
	if st.Type != appsv1.RecreateDeploymentStrategyType && st.RollingUpdate != nil && !isZero(st.RollingUpdate.MaxUnavailable) {
		p.broken = true
	}

	// Containers.
	native := spec.PreStop.Action == "Sleep" || (spec.PreStop.Action != "Exec" && nativeSleep)
	threshold := max(spec.Changes.DecreaseThresholdSeconds, 1)
	for _, i := range targets {
		c := &podSpec.Containers[i]
		h := hooks[i]
		cp := containerPlan{name: c.Name, seconds: preStop, native: native}
		switch {
		case h.kind != hookNone && !h.owned && spec.PreStop.Existing != "Replace":
			cp.seconds = countedWait(h, preStop)
		case h.owned && ((native && h.kind == hookSleep) || (!native && h.kind == hookExecSleep)) &&
			*h.seconds >= preStop && *h.seconds-preStop < threshold:
			cp.seconds, cp.ours, cp.keptForm = *h.seconds, true, h.kind
		default:
			cp.set, cp.ours = true, true
			p.changed = true
		}
		p.containers = append(p.containers, cp)
	}

	// Grace.
	var wait int64
	for _, cp := range p.containers {
		wait = max(wait, cp.seconds)
	}
	required := wait + extra
	graceSet := podSpec.TerminationGracePeriodSeconds != nil
	ours := rec != nil && rec.GraceOwned && rec.Grace == grace && graceSet
	desired := grace
	if grace < required || (ours && grace-required >= threshold) {
		desired = required
	}
	if desired != grace || (!graceSet && p.changed) {
		p.changed = true
	}
	p.grace, p.graceOwned = desired, desired != grace || ours

	// Strategy.
	p.strategy = st
	if spec.Rollout.Manage && st.Type != appsv1.RecreateDeploymentStrategyType {
		p.manageStrategy = true
		var surge, unavailable *intstr.IntOrString
		if st.RollingUpdate != nil {
			surge, unavailable = st.RollingUpdate.MaxSurge, st.RollingUpdate.MaxUnavailable
		}
		if !(isZero(unavailable) && surges(surge, ptrOr(d.Spec.Replicas, 1))) {
			ms, mu := spec.Rollout.MaxSurge, intstr.FromInt32(0)
			p.strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &ms, MaxUnavailable: &mu}}
			p.changed = true
		}
	}

	// Churn: one template change per minIntervalSeconds unless the budget is broken.
	if p.changed && !p.broken && rec != nil {
		if t, err := time.Parse(time.RFC3339, rec.Time); err == nil {
			due := t.Add(time.Duration(spec.Changes.MinIntervalSeconds) * time.Second)
			if now.Before(due) {
				return plan{}, due.Sub(now)
			}
		}
	}
	return p, 0
}

func ptrOr[T any](p *T, v T) T {
	if p == nil {
		return v
	}
	return *p
}

func intOrString(v *intstr.IntOrString) intstr.IntOrString {
	if v == nil {
		return intstr.FromString("25%")
	}
	return *v
}

// applyConfiguration: gracekeeper's apply configuration for the plan.
func applyConfiguration(d *appsv1.Deployment, p *plan, policyName string, now time.Time) (*appsv1ac.DeploymentApplyConfiguration, error) {
	rec := appliedRecord{Policy: policyName, Grace: p.grace, GraceOwned: p.graceOwned,
		Propagation: jsonFloat(p.propagation), Containers: []string{}, Time: now.UTC().Format("2006-01-02T15:04:05Z")}
	podSpec := corev1ac.PodSpec().WithTerminationGracePeriodSeconds(p.grace)
	for _, cp := range p.containers {
		if !cp.ours {
			continue
		}
		rec.PreStop = max(rec.PreStop, cp.seconds)
		rec.Containers = append(rec.Containers, cp.name)
		sleep := cp.native
		if !cp.set {
			sleep = cp.keptForm == hookSleep
		}
		handler := corev1ac.LifecycleHandler()
		if sleep {
			handler.WithSleep(corev1ac.SleepAction().WithSeconds(cp.seconds))
		} else {
			handler.WithExec(corev1ac.ExecAction().WithCommand("sleep", strconv.FormatInt(cp.seconds, 10)))
		}
		podSpec.WithContainers(corev1ac.Container().WithName(cp.name).
			WithLifecycle(corev1ac.Lifecycle().WithPreStop(handler)))
	}
	record, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	spec := appsv1ac.DeploymentSpec().WithTemplate(corev1ac.PodTemplateSpec().WithSpec(podSpec))
	if p.manageStrategy {
		ru := appsv1ac.RollingUpdateDeployment()
		if p.strategy.RollingUpdate != nil {
			ru.WithMaxSurge(intOrString(p.strategy.RollingUpdate.MaxSurge)).
				WithMaxUnavailable(intOrString(p.strategy.RollingUpdate.MaxUnavailable))
		}
		spec.WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RollingUpdateDeploymentStrategyType).
			WithRollingUpdate(ru))
	}
	return appsv1ac.Deployment(d.Name, d.Namespace).
		WithAnnotations(map[string]string{annApplied: string(record)}).
		WithSpec(spec), nil
}

func optedIn(o client.Object) bool {
	return o.GetAnnotations()[annEnabled] == "true" || o.GetLabels()[annEnabled] == "true"
}

// otherAppliers: whether a manager other than ours wrote this object with Apply.
func otherAppliers(d *appsv1.Deployment) bool {
	for _, m := range d.ManagedFields {
		if m.Operation == metav1.ManagedFieldsOperationApply && m.Manager != fieldManager {
			return true
		}
	}
	return false
}

type reconciler struct {
	client.Client
	nativeSleep bool
}

func (r *reconciler) policyFor(ctx context.Context, d *appsv1.Deployment) (string, *policySpec, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(policyGVK.GroupVersion().WithKind("ShutdownPolicyList"))
	if err := r.List(ctx, list, client.InNamespace(d.Namespace)); err != nil {
		return "", nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].GetName() < list.Items[j].GetName() })
	wanted := d.Annotations[annPolicy]
	for i := range list.Items {
		item := &list.Items[i]
		if wanted != "" && item.GetName() != wanted {
			continue
		}
		spec := defaultSpec()
		if raw, ok := item.Object["spec"].(map[string]any); ok {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
				continue
			}
		}
		if wanted == "" && spec.Selector != nil {
			sel, err := metav1.LabelSelectorAsSelector(spec.Selector)
			if err != nil || !sel.Matches(labels.Set(d.Labels)) {
				continue
			}
		}
		return item.GetName(), &spec, nil
	}
	return "", nil, nil
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	d := &appsv1.Deployment{}
	if err := r.Get(ctx, req.NamespacedName, d); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !optedIn(d) || !d.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	name, spec, err := r.policyFor(ctx, d)
	if err != nil || spec == nil || spec.Mode != "Enforce" {
		return reconcile.Result{}, err
	}
	now := time.Now()
	p, wait := computePlan(d, spec, r.nativeSleep, now)
	if wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if !p.changed {
		return reconcile.Result{}, nil // compliant
	}
	ac, err := applyConfiguration(d, &p, name, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	opts := []client.ApplyOption{client.FieldOwner(fieldManager)}
	if spec.PreStop.Existing == "Replace" || !otherAppliers(d) {
		opts = append(opts, client.ForceOwnership)
	}
	if err := r.Apply(ctx, ac, opts...); err != nil {
		if apierrors.IsConflict(err) {
			log.Info("field conflict", "deployment", req.String(), "error", err.Error())
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	log.Info("tuned", "deployment", req.String())
	return reconcile.Result{}, nil
}

func main() {
	qps := flag.Float64("qps", -1, "the client's QPS; negative: no client-side rate limit (controller-runtime's default)")
	burst := flag.Int("burst", 0, "the client's burst (with --qps > 0)")
	workers := flag.Int("workers", 1, "MaxConcurrentReconciles")
	userAgent := flag.String("user-agent", "gracekeeper-peer", "the client's user agent")
	metricsAddr := flag.String("metrics-bind-address", "0", "metrics endpoint; 0: off")
	probeAddr := flag.String("health-probe-bind-address", "0", "health probes; 0: off")
	flag.Parse()
	// JSON lines on stderr at info level, as controller-runtime's production
	// logger writes them but without its sampling (after 100 equal messages a
	// second it keeps one in 100): the peer logs every tune, as gracekeeper
	// does, and operator-bench counts them.
	encoder := uberzap.NewProductionEncoderConfig()
	encoder.EncodeTime = zapcore.RFC3339TimeEncoder
	ctrl.SetLogger(zapr.NewLogger(uberzap.New(zapcore.NewCore(zapcore.NewJSONEncoder(encoder),
		zapcore.Lock(os.Stderr), zapcore.InfoLevel))))
	setupLog := ctrl.Log.WithName("setup")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		setupLog.Error(err, "kubeconfig")
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	cfg.UserAgent = *userAgent

	nativeSleep := true
	if dc, err := discovery.NewDiscoveryClientForConfig(cfg); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			major, _ := strconv.Atoi(strings.TrimRight(v.Major, "+"))
			minor, _ := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
			nativeSleep = major > 1 || (major == 1 && minor >= 30)
		}
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		setupLog.Error(err, "scheme")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// Reads of unstructured objects (the policies) go to the API server
		// unless asked for from the cache; with kubebuilder-generated typed
		// policies they would be cached, as the Deployments are.
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *probeAddr,
	})
	if err != nil {
		setupLog.Error(err, "manager")
		os.Exit(1)
	}
	r := &reconciler{Client: mgr.GetClient(), nativeSleep: nativeSleep}
	policy := &unstructured.Unstructured{}
	policy.SetGroupVersionKind(policyGVK)
	// A policy change re-plans the opted-in Deployments of its namespace.
	byPolicy := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &appsv1.DeploymentList{}
		if err := r.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			if optedIn(&list.Items[i]) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{
					Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
			}
		}
		return out
	})
	err = ctrl.NewControllerManagedBy(mgr).
		Named("peer").
		For(&appsv1.Deployment{}, builder.WithPredicates(predicate.NewPredicateFuncs(optedIn))).
		Watches(policy, byPolicy).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(r)
	if err != nil {
		setupLog.Error(err, "controller")
		os.Exit(1)
	}
	setupLog.Info("starting", "qps", *qps, "burst", *burst, "workers", *workers,
		"nativeSleep", nativeSleep, "version", fmt.Sprint(peerVersion))
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "manager stopped")
		os.Exit(1)
	}
}

// peerVersion is set by test/bench/build-peer (-X main.peerVersion=...).
var peerVersion = "dev"
