"""The vLLM classes the engine patch hooks, one module each: the methods it replaces (``REPLACES``) and
``install``, which puts one wrapper on each method calling the hook lists it is given (``hooks.chain``).

- ``scheduler``: ``Scheduler`` and ``AsyncScheduler`` (engine-core process);
- ``engine_core``: ``EngineCore`` (engine-core process);
- ``structured_output``: ``StructuredOutputManager`` (engine-core process);
- ``model_runner``: ``GPUModelRunner``, the CPU's runner included (worker process);
- ``model_runner_v2``: the V2 ``GPUModelRunner`` a GPU runs for asynchronous speculation (worker process);
- ``dflash``: the DFlash drafter, ``DFlashProposer`` and ``DFlashQwen3Model`` (worker process).
"""

from dspark_serve.targets import dflash, engine_core, model_runner, model_runner_v2, scheduler, structured_output

TARGETS = (scheduler, engine_core, structured_output, model_runner, model_runner_v2, dflash)
