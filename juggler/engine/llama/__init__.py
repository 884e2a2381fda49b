"""The llama.cpp boundary. `ports`: the small protocols the workers use (vocabulary,
context, batch, sampler, and the model that makes them); `native` and `native_context`:
their implementation over llama-cpp-python, where llama.cpp failures become Juggler
errors; `sampling`: sampling parameters, UTF-8 assembly and stop strings (pure);
`chat`: chat templates."""
