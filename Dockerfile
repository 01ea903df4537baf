# Two images from one file:
#   vllm-plugin  `docker build --target vllm-plugin -t specgw-vllm-plugin .`: the official
#                vLLM OpenAI image running its own `vllm serve`, with only the specgw plugin
#                added (probes, self-check, specgw_* on vLLM's /metrics). Run:
#                docker run --gpus all -p 8000:8000 specgw-vllm-plugin <model> \
#                  --speculative-config '{"method":"eagle3","model":"<draft>","num_speculative_tokens":3}'
#   specgw       (default, last stage) `specgw serve`: our gateway + engine extension.

# ---- stock `vllm serve` + specgw plugin: nothing but our package on top of vLLM's image.
FROM vllm/vllm-openai:v0.26.0 AS vllm-plugin

WORKDIR /opt/specgw
COPY pyproject.toml README.md ./
COPY engine_ext ./engine_ext
COPY monitoring ./monitoring
# --no-deps: vLLM and prometheus-client come with the base image; vLLM is not touched.
RUN python3 -m pip install --no-cache-dir --no-deps . \
 && useradd --create-home --uid 10001 specgw \
 && mkdir -p /home/specgw/.cache && chown -R specgw /home/specgw

USER specgw
# A set VLLM_PLUGINS also filters general plugins: name both of ours.
ENV VLLM_PLUGINS=specgw_probes,specgw_endpoints \
    HF_HOME=/home/specgw/.cache/huggingface
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4).status == 200 else 1)"
ENTRYPOINT ["vllm", "serve", "--host", "0.0.0.0", "--port", "8000", "--worker-extension-cls", "engine_ext.worker_extension.ProbeWorkerExtension"]

# ---- `specgw serve`
# Production image for NVIDIA GPUs (the `cuda` extra): upstream vLLM's image, our
# gateway + engine extension on top, non-root, health-checked on /ready.
FROM vllm/vllm-openai:v0.26.0 AS specgw

WORKDIR /opt/specgw
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY engine_ext ./engine_ext
COPY monitoring ./monitoring
COPY models ./models
# vLLM is already in the base image: install only our package and its light deps.
RUN python3 -m pip install --no-cache-dir --no-deps . \
 && python3 -m pip install --no-cache-dir "prometheus-client>=0.20" "rich>=13" "tqdm>=4.66" \
 && useradd --create-home --uid 10001 specgw \
 && mkdir -p /home/specgw/.cache && chown -R specgw /home/specgw /opt/specgw

USER specgw
ENV SPECGW_BUNDLED_DIR=/opt/specgw/models/tiny-code-llama \
    SPECGW_HOST=0.0.0.0 SPECGW_PORT=8000 SPECGW_LOG_FORMAT=json \
    HF_HOME=/home/specgw/.cache/huggingface
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=4).status == 200 else 1)"
ENTRYPOINT ["specgw"]
CMD ["serve"]
