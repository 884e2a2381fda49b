"""The gateway face, for Kubernetes' Gateway API Inference Extension (seed 004) and
Prometheus: `metrics_route` serves `GET /metrics` from `metrics` (vLLM's families, the
one Prometheus registry) and `lemonade_metrics` (Lemonade's `lemonade_*` families), read
from the router's figures (`core/figures.py`), never by a fan-out; `adapter_routes`
registers, lists and unregisters LoRA adapters (vLLM's `/v1/load_lora_adapter` too; the
routing itself is `core/adapters.py`)."""
