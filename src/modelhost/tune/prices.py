"""Hourly prices for `--instance-price`: a number, or an instance type from this small table.

EC2 on-demand Linux prices in us-east-1 (USD per hour) as AWS published them in 2025. Prices change and differ
by region and by service (SageMaker's ml.* instances cost more than the EC2 ones): pass a number for anything
else, or to be exact.
"""

from __future__ import annotations

EC2_US_EAST_1 = {
    "c6i.large": 0.085,
    "c6i.xlarge": 0.17,
    "c6i.2xlarge": 0.34,
    "c6i.4xlarge": 0.68,
    "c7i.large": 0.08925,
    "c7i.xlarge": 0.1785,
    "c7i.2xlarge": 0.357,
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "m6i.2xlarge": 0.384,
    "g4dn.xlarge": 0.526,
    "g5.xlarge": 1.006,
    "g6.xlarge": 0.8048,
}


def parse_price(text: str) -> tuple[float, str]:
    """(USD per hour, what it is) from `0.34` or `c6i.2xlarge`; ValueError with the known types otherwise."""
    value = text.strip()
    try:
        price = float(value)
    except ValueError:
        if value in EC2_US_EAST_1:
            return EC2_US_EAST_1[value], f"{value} (EC2 on-demand, us-east-1)"
        known = ", ".join(EC2_US_EAST_1)
        raise ValueError(f"expected a price per hour or one of {known}; got {text!r}") from None
    if not price > 0 or price == float("inf"):
        raise ValueError(f"the price per hour must be a positive number, got {text!r}")
    return price, f"{price:g} per hour"


def cost_per_million(price_per_hour: float, throughput: float) -> float | None:
    """What a million inferences cost at this throughput on an instance of this price (Inference Recommender's
    CostPerInference, times a million)."""
    if throughput <= 0:
        return None
    return price_per_hour / (throughput * 3600) * 1e6
