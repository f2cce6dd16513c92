# Writes the GPU-like fixtures of enginelog/enginelogtest/testdata (README.md there): vLLM
# 0.32.0's layout of a failed start as the CPU build prints it (the failing
# process's ERROR traceback, the EngineCore's, "Process EngineCore:", the API
# server's, the resource tracker's warnings) with the GPU-only texts quoted from
# vLLM 0.32.0 and torch 2.13. Usage: python3 gen_gpu_logs.py enginelog/enginelogtest/testdata
import sys
V = "/usr/local/lib/python3.12/dist-packages/vllm"
P = "/usr/lib/python3.12"
API, CORE, WORK = 2211, 2390, 2465
T = "12-01 22:36:11"

def banner(model, maxlen):
    return f"""(APIServer pid={API}) INFO 12-01 22:35:19 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid={API}) INFO 12-01 22:35:19 [api_utils.py:347]   █▄█▀ █     █     █     █  model   {model}
(APIServer pid={API}) INFO 12-01 22:35:19 [api_utils.py:286] non-default args: {{'model_tag': '{model}', 'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'enable_prompt_tokens_details': True, 'host': '127.0.0.1', 'port': 8100, 'model': '{model}', 'served_model_name': ['{model}'], 'max_num_seqs': 128}}
(APIServer pid={API}) INFO 12-01 22:35:20 [model.py:733] Resolved architecture: Qwen3ForCausalLM
(APIServer pid={API}) INFO 12-01 22:35:20 [model.py:2152] Using max model len {maxlen}
(EngineCore pid={CORE}) INFO 12-01 22:35:42 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='{model}', speculative_config=None, tokenizer='{model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, dtype=torch.bfloat16, max_seq_len={maxlen}, download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, device_config=cuda
(EngineCore pid={CORE}) INFO 12-01 22:35:42 [multiproc_executor.py:153] DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=127.0.0.1, mq_connect_ip=127.0.0.1 (local), world_size=1, local_world_size=1
(Worker pid={WORK}) INFO 12-01 22:36:01 [parallel_state.py:1906] world_size=1 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:43117 backend=nccl
"""

def frames(prefix, fs):
    out = []
    for path, line, fn, code in fs:
        out.append(f'{prefix}  File "{path}", line {line}, in {fn}')
        out.append(f"{prefix}    {code}")
    return out

def logged(who, pid, src, msg, tb, exc):
    p = f"({who} pid={pid}) ERROR {T} [{src}] "
    return [p + msg, p + "Traceback (most recent call last):"] + frames(p, tb) + [p + exc]

CORE_TB = [
    (f"{V}/v1/engine/core.py", 1482, "run_engine_core", "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"),
    (f"{V}/v1/engine/core.py", 1194, "__init__", "super().__init__("),
    (f"{V}/v1/engine/core.py", 144, "__init__", "self.model_executor = executor_class(vllm_config)"),
    (f"{V}/v1/executor/abstract.py", 126, "__init__", "self._init_executor()"),
    (f"{V}/v1/executor/multiproc_executor.py", 215, "_init_executor", "self.workers = WorkerProc.wait_for_ready(unready_workers)"),
    (f"{V}/v1/executor/multiproc_executor.py", 815, "wait_for_ready", "raise e from None"),
]
CORE_KV_TB = [
    (f"{V}/v1/engine/core.py", 1482, "run_engine_core", "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"),
    (f"{V}/v1/engine/core.py", 1194, "__init__", "super().__init__("),
    (f"{V}/v1/engine/core.py", 157, "__init__", "kv_cache_config = self._initialize_kv_caches(vllm_config)"),
    (f"{V}/v1/engine/core.py", 379, "_initialize_kv_caches", "self.model_executor.compile_or_warm_up_model()"),
    (f"{V}/v1/executor/abstract.py", 142, "compile_or_warm_up_model", '"compile_or_warm_up_model"'),
    (f"{V}/v1/executor/multiproc_executor.py", 455, "collective_rpc", "return future if non_block else future.result()"),
    (f"{V}/v1/executor/multiproc_executor.py", 444, "get_response", "raise RuntimeError("),
]

def tail(core_exc, core_tb):
    # The EngineCore's own traceback (printed by multiprocessing), the API
    # server's, then the resource tracker's warnings.
    out = ["Process EngineCore:", "Traceback (most recent call last):"]
    out += frames("", [(f"{P}/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
                       (f"{P}/multiprocessing/process.py", 108, "run", "self._target(*self._args, **self._kwargs)"),
                       (f"{V}/v1/engine/core.py", 1514, "run_engine_core", "raise e")] + core_tb)
    out.append(core_exc)
    out += ["Traceback (most recent call last):", '  File "/usr/local/bin/vllm", line 10, in <module>', "    sys.exit(main())"]
    api = [(f"{V}/entrypoints/cli/main.py", 120, "main", "args.dispatch_function(args)"),
           (f"{V}/entrypoints/cli/serve.py", 156, "cmd", "uvloop.run(run_server(args))")]
    api += [("/usr/local/lib/python3.12/dist-packages/uvloop/__init__.py", 92, "run", "return runner.run(wrapper())"),
            (f"{P}/asyncio/runners.py", 118, "run", "return self._loop.run_until_complete(task)")]
    api += [(f"{V}/entrypoints/launchers/api_server/entry.py", 177, "run_server", "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)"),
            (f"{V}/entrypoints/launchers/api_server/entry.py", 195, "run_server_worker", "async with build_async_engine_client("),
            (f"{P}/contextlib.py", 210, "__aenter__", "return await anext(self.gen)"),
            (f"{V}/entrypoints/launchers/api_server/entry.py", 61, "build_async_engine_client", "async with build_async_engine_client_from_engine_args("),
            (f"{P}/contextlib.py", 210, "__aenter__", "return await anext(self.gen)"),
            (f"{V}/entrypoints/launchers/api_server/entry.py", 95, "build_async_engine_client_from_engine_args", "async_llm = AsyncLLM.from_vllm_config("),
            (f"{V}/v1/engine/async_llm.py", 255, "from_vllm_config", "return cls("),
            (f"{V}/v1/engine/async_llm.py", 184, "__init__", "self.engine_core = EngineCoreClient.make_async_mp_client("),
            (f"{V}/v1/engine/core_client.py", 167, "make_async_mp_client", "return AsyncMPClient("),
            (f"{V}/v1/engine/core_client.py", 1120, "__init__", "super().__init__("),
            (f"{V}/v1/engine/core_client.py", 682, "__init__", "with launch_core_engines("),
            (f"{P}/contextlib.py", 144, "__exit__", "next(self.gen)"),
            (f"{V}/v1/engine/utils.py", 1351, "launch_core_engines", "wait_for_engine_startup("),
            (f"{V}/v1/engine/utils.py", 1431, "wait_for_engine_startup", "raise RuntimeError(")]
    out += frames("", api)
    out.append("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}")
    out.append(f"{P}/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown")
    out.append("  warnings.warn('resource_tracker: There appear to be %d '")
    out.append(f"{P}/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked shared_memory objects to clean up at shutdown")
    out.append("  warnings.warn('resource_tracker: There appear to be %d '")
    return out

WORKER_INIT_TB = [
    (f"{V}/v1/executor/multiproc_executor.py", 920, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
    (f"{V}/v1/executor/multiproc_executor.py", 679, "__init__", "self.worker.init_device()"),
    (f"{V}/v1/worker/worker_base.py", 350, "init_device", "self.worker.init_device()  # type: ignore"),
]
WORKER_EXC = "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause."

def free_memory():
    exc = ("ValueError: Free memory on device cuda:0 (3.12/79.19 GiB) on startup is less than desired GPU memory "
           "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    tb = WORKER_INIT_TB + [(f"{V}/v1/worker/gpu_worker.py", 535, "init_device", "self.requested_memory = request_memory("),
                           (f"{V}/v1/worker/utils.py", 762, "request_memory", "raise ValueError(")]
    lines = banner("Qwen/Qwen3-8B", 40960).splitlines()
    lines += logged("Worker", WORK, "multiproc_executor.py:953", "WorkerProc failed to start.", tb, exc)
    lines.append(f"(EngineCore pid={CORE}) INFO {T} [multiproc_executor.py:479] [shutdown] Executor: waiting for worker exit count=1")
    lines += logged("EngineCore", CORE, "core.py:1510", "EngineCore failed to start.", CORE_TB, WORKER_EXC)
    return lines + tail(WORKER_EXC, CORE_TB)

def cuda_oom():
    torch_oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total capacity of "
                 "23.52 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 22.45 GiB memory in use. "
                 "Of the allocated memory 21.91 GiB is allocated by PyTorch, and 96.44 MiB is reserved by PyTorch but "
                 "unallocated. If reserved but unallocated memory is large try setting "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
                 "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")
    vllm_oom = ("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
                "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")
    core_exc = ("RuntimeError: Worker failed with error '" + vllm_oom.removeprefix("RuntimeError: ") +
                "', please check the stack trace above for the root cause")
    busy = [(f"{V}/v1/executor/multiproc_executor.py", 1055, "_execute_worker_rpc", "output = func(*args, **kwargs)"),
            (f"{V}/v1/worker/gpu_worker.py", 1058, "compile_or_warm_up_model", "self.model_runner._dummy_sampler_run(hidden_states=last_hidden_states)")]
    lines = banner("Qwen/Qwen3-8B", 40960).splitlines()
    # vLLM 0.32.0 v1/worker/gpu_worker.py:1013-1034 logs this at INFO on every start
    # with --kv-cache-memory unset: it is no cause.
    lines.append(f"(Worker pid={WORK}) INFO 12-01 22:36:09 [gpu_worker.py:1034] Free memory on device (22.87/23.52 GiB) on startup. "
                 "Desired GPU memory utilization is (0.9, 21.17 GiB). Actual usage is 15.26 GiB for consumed memory "
                 "(weights + non-torch), 1.04 GiB for peak activation, and 0.00 GiB for CUDAGraph memory. Replace "
                 "gpu_memory_utilization config with `--kv-cache-memory=5038037811` (4.69 GiB) to fit into requested "
                 "memory, or `--kv-cache-memory=6899262054` (6.43 GiB) to fully utilize gpu memory. Current kv cache "
                 "memory in use is 4.69 GiB.")
    p = f"(Worker pid={WORK}) ERROR {T} [multiproc_executor.py:1063] "
    lines += [p + "WorkerProc hit an exception.", p + "Traceback (most recent call last):"]
    lines += frames(p, [(f"{V}/v1/worker/gpu_model_runner.py", 5968, "_dummy_sampler_run", "sampler_output = self.sampler("),
                        ("/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", 1779, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
                        (f"{V}/v1/sample/sampler.py", 97, "forward", "logits = logits.to(torch.float32)")])
    lines.append(p + torch_oom)
    lines.append(p)
    lines.append(p + "The above exception was the direct cause of the following exception:")
    lines.append(p)
    lines.append(p + "Traceback (most recent call last):")
    lines += frames(p, busy + [(f"{V}/v1/worker/gpu_model_runner.py", 5990, "_dummy_sampler_run", "raise RuntimeError(")])
    lines.append(p + vllm_oom)
    lines += logged("EngineCore", CORE, "core.py:1510", "EngineCore failed to start.", CORE_KV_TB, core_exc)
    lines.append(f"(EngineCore pid={CORE}) ERROR 12-01 22:36:14 [multiproc_executor.py:315] Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor.")
    return lines + tail(core_exc, CORE_KV_TB)

def no_cuda():
    exc = "RuntimeError: No CUDA GPUs are available"
    tb = WORKER_INIT_TB + [(f"{V}/v1/worker/gpu_worker.py", 501, "init_device", "torch.accelerator.set_device_index(self.device)"),
                           ("/usr/local/lib/python3.12/dist-packages/torch/accelerator/__init__.py", 197, "set_device_index", "torch._C._accelerator_setDeviceIndex(device_index)"),
                           ("/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py", 424, "_lazy_init", "torch._C._cuda_init()")]
    lines = banner("Qwen/Qwen3-8B", 40960).splitlines()
    lines += logged("Worker", WORK, "multiproc_executor.py:953", "WorkerProc failed to start.", tb, exc)
    lines += logged("EngineCore", CORE, "core.py:1510", "EngineCore failed to start.", CORE_TB, WORKER_EXC)
    return lines + tail(WORKER_EXC, CORE_TB)

for name, f in [("free-memory", free_memory), ("cuda-oom", cuda_oom), ("no-cuda", no_cuda)]:
    with open(f"{sys.argv[1]}/vllm-0.32-gpu-{name}.log", "w") as fh:
        fh.write("\n".join(f()) + "\n")
