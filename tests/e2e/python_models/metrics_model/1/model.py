"""OUTPUT0 = INPUT0, with custom metrics per request: a counter of requests, a gauge of the last INPUT0's
element count and a histogram of INPUT0's sum (buckets 1, 10, 100), all labelled with the model and version."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.requests_family = pb_utils.MetricFamily(
            name="custom_requests_total",
            description="Requests seen by metrics_model",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.size_family = pb_utils.MetricFamily(
            name="custom_last_input_size",
            description="Elements of the last INPUT0",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        self.sum_family = pb_utils.MetricFamily(
            name="custom_input_sum",
            description="Sum of INPUT0",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.requests = self.requests_family.Metric(labels=labels)
        self.size = self.size_family.Metric(labels=labels)
        self.sum = self.sum_family.Metric(labels=labels, buckets=[1.0, 10.0, 100.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            self.requests.increment(1)
            self.size.set(in_0.size)
            self.sum.observe(float(in_0.sum()))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", in_0)]))
        return responses
