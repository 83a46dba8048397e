// The real implementations of the reconcilers' ports
// (include/gracekeeper/deployment/ports.h), on kube::Client, the Event
// recorder and the propagation sources (kube_ports.cpp).
#pragma once

#include <memory>

#include "gracekeeper/deployment/ports.h"

namespace gracekeeper::propagation {
class SampleBook;
}
namespace gracekeeper::kube {
class Client;
struct Resource;
class EventRecorder;
}  // namespace gracekeeper::kube

namespace gracekeeper::controller {

std::unique_ptr<Clock> system_clock();
// Writes Deployments, or another workload resource (StatefulSets).
std::unique_ptr<DeploymentWriter> kube_deployment_writer(kube::Client&,
                                                         const kube::Resource& resource);
std::unique_ptr<StatusWriter> kube_status_writer(kube::Client&);
std::unique_ptr<EventSink> recorder_sink(kube::EventRecorder&);
// `prometheus` may be null (no --prometheus-url); `samples` may be null (no
// EndpointSlice watch: source Observed then has no samples).
std::unique_ptr<PropagationMeter> propagation_meter(propagation::Prometheus* prometheus,
                                                    const propagation::SampleBook* samples);

}  // namespace gracekeeper::controller
