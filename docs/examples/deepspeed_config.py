"""You own DeepSpeed's config, the plugin owns its precision section: ZeRO-3 on CPU, and
a contradiction refused."""

from quick_deepspeed import Model

from precision_base import Trainer
from precision_deepspeed import DeepSpeedCPUStrategy

if __name__ == "__main__":
    config = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 8}
    trainer = Trainer(
        precision_plugin="deepspeed:bf16-mixed",
        strategy=DeepSpeedCPUStrategy(config=config),
        max_steps=2,
        logger=False,
    )
    trainer.fit(Model())
    print(
        "stage",
        trainer.strategy.config["zero_optimization"]["stage"],
        "bf16",
        trainer.strategy.config["bf16"],
    )

    # a precision section of your own that contradicts the plugin is an error, never
    # silently overwritten
    contradicting = {"fp16": {"enabled": True}, "train_micro_batch_size_per_gpu": 8}
    try:
        Trainer(
            precision_plugin="deepspeed:bf16-mixed",
            strategy=DeepSpeedCPUStrategy(config=contradicting),
        )
    except ValueError as error:
        print(f"{type(error).__name__}: {error}")
