# The compose stack's MedGym image (build.sh): the deps image plus the project at /opt/medgym, importable from
# anywhere (a .pth, as `pip install -e .` makes it; Prefect's flow runs import flows.pipeline by module path), the
# `medgym` command, the embedded models in .state/models (a named volume on .state starts as a copy of them) and
# medgym-build.json (the commit and DVC lock versions runs record where no checkout is). With no network.
ARG DEPS
FROM ${DEPS}
WORKDIR /opt/medgym
COPY app/ /opt/medgym/
RUN echo /opt/medgym > /usr/local/lib/python3.11/dist-packages/medgym.pth \
 && printf '#!/usr/bin/python3\nimport sys\nfrom flows.cli import main\nsys.exit(main())\n' > /usr/local/bin/medgym \
 && chmod 755 /usr/local/bin/medgym \
 && HF_HUB_OFFLINE=1 python -m components.policies.models >/dev/null \
 && medgym --help >/dev/null
ARG MEDGYM_GIT_COMMIT=unknown
ARG MEDGYM_GIT_DIRTY=false
COPY locks/ /tmp/medgym-build/
RUN python -m components.tracking.source --commit "${MEDGYM_GIT_COMMIT}" --dirty "${MEDGYM_GIT_DIRTY}" \
      --locks /tmp/medgym-build --out /opt/medgym/medgym-build.json \
 && rm -rf /tmp/medgym-build
ENV HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
ENTRYPOINT ["medgym"]
CMD ["--help"]
