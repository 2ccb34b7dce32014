"""BLS from the model's own threads while its main thread joins them (as Triton's BLS qa model does): each
thread forwards the inputs to "add_sub"; OUTPUT0 is the first thread's answer, OUTPUT1 the second's."""

import threading

import triton_python_backend_utils as pb_utils


def _call(inputs, answers, slot):
    bls = pb_utils.InferenceRequest(
        model_name="add_sub", requested_output_names=[f"OUTPUT{slot}"], inputs=inputs
    )
    answers[slot] = bls.exec()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            answers = [None, None]
            threads = [threading.Thread(target=_call, args=(inputs, answers, i)) for i in (0, 1)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()  # the main thread reads nothing meanwhile: the waiting threads read their replies
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.get_output_tensor_by_name(answers[0], "OUTPUT0"),
                        pb_utils.get_output_tensor_by_name(answers[1], "OUTPUT1"),
                    ]
                )
            )
        return responses
