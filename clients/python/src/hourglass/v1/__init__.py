# The API's generated code (hourglass_pb2*.py, .pyi): bash scripts/gen.sh
# writes it from proto/hourglass/v1/hourglass.proto. Do not edit those files.
