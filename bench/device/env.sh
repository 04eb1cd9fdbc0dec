# Source from the repository root on the machine that got .devrun (bench/device/payload.sh):
# puts what this Python lacks of the carried wheels, and vLLM's Python files, on PYTHONPATH;
# builds rdmaq's extension in place; `python3 -m rdmaq.bench.cli ...` is then `rdmaq bench`.
# Returns non-zero (and says why) when something is missing.
rdmaq_devrun_env() {
	local d=$PWD/.devrun site=/tmp/rdmaq-devrun/site spec mod whl
	[ -d "$d" ] || { echo "env.sh: no .devrun here (carry it; bench/device/payload.sh builds it)"; return 1; }
	mkdir -p "$site"
	[ -d "$site/vllm" ] || tar -C "$site" -xJf "$d/vllm-py.tar.xz" || return 1
	for spec in zmq:pyzmq cffi:cffi pycparser:pycparser regex:regex urllib3:urllib3 packaging:packaging; do
		mod=${spec%%:*}
		whl=${spec#*:}
		python3 -c "import $mod" 2>/dev/null && continue
		python3 -m zipfile -e "$(ls "$d"/wheels/"$whl"-*.whl | head -1)" "$site" || return 1
	done
	export PYTHONPATH=$PWD:$site${PYTHONPATH:+:$PYTHONPATH}
	export XDG_CACHE_HOME=$d/cache
	[ -e rdmaq/bench ] || ln -s ../bench rdmaq/bench
	if [ ! -e rdmaq/_rdmaq.abi3.so ] || [ -n "$(find csrc -newer rdmaq/_rdmaq.abi3.so -print -quit)" ]; then
		python3 setup.py -q build_ext --inplace >/tmp/rdmaq-devrun/build.log 2>&1 ||
			{ tail -30 /tmp/rdmaq-devrun/build.log; return 1; }
	fi
	python3 -c 'import rdmaq, zmq, vllm; print("env.sh: rdmaq", rdmaq.__version__, "zmq", zmq.__version__, "vllm", vllm.__version__)' 2>&1 | tail -1
}
rdmaq_devrun_env
