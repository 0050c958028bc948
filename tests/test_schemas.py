import msgspec
import pytest

from service.schemas import BUDGET_LABELS, FACT_LABELS, PHASES, Budget, Diagnosis, Facts, Wire


def test_phase_vocabulary_is_the_design_contract() -> None:
    assert set(PHASES) == {
        "startup_budget",
        "weights_oom",
        "kv_cache_capacity",
        "warmup_oom",
        "runtime_oom",
        "kv_preemption",
        "request_too_long",
        "profiling_inconsistent",
        "parallelism_config",
        "quantization_config",
        "dtype_unsupported",
        "host_oom",
        "not_memory",
        "no_failure",
    }


def test_facts_omit_unset_values_in_json() -> None:
    assert msgspec.json.encode(Facts(max_model_len=2048)) == b'{"max_model_len":2048}'


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.json.decode(b'{"max_model_len": 1, "bogus": 2}', type=Facts)


def test_diagnosis_is_a_wire_type() -> None:
    assert issubclass(Diagnosis, Wire)


def test_labels_name_real_fields_and_shared_figures_read_alike() -> None:
    assert set(FACT_LABELS) <= set(Facts.__struct_fields__)
    assert set(BUDGET_LABELS) <= set(Budget.__struct_fields__)
    assert FACT_LABELS["model_weights_gib"] == BUDGET_LABELS["weights_gib"]
