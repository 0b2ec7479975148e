// Writes: a mutation that refreshes the named queries when it lands.
import { useMutation, useQueryClient } from "@tanstack/react-query";

export function useAction<V, R>(fn: (v: V) => Promise<R>, invalidate: string[][], onDone?: (r: R) => void) {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: fn,
    onSuccess: (r) => {
      for (const key of invalidate) void qc.invalidateQueries({ queryKey: key });
      onDone?.(r);
    },
  });
}

/** Who did it, for the `by` fields of control-plane writes. */
export const CONSOLE_BY = "console";
