// Heap footprint of real Apache Flink's heap keyed state backend (HashMapStateBackend):
// Java heap bytes per entry of a ValueState<Long> with Long keys, for N keys (default 1,000,000).
// The benchmark report runs it through footprint.sh (next to this file) to compare statekit's
// in-memory size per entry with Flink's.
//
// A one-slot MiniCluster job (parallelism 1, max parallelism 128, state.backend.type=hashmap)
// gets its keyed state backend exactly as a real task does. The operator, on its only record:
// full GCs until the used heap is stable, reads it; writes keys 0..N-1 with values k+1_000_000
// (outside the Long cache, so each value is a real boxed object, as in a real job); full GCs
// again and reads the used heap. The backend keeps every key and value strongly reachable, so
// (after - before) / N is what one entry costs: map entry + boxed key + boxed value + its share
// of the hash tables (one per key group).
//
// Usage: java ... HeapFootprint [N]   (run with -XX:+UseG1GC; see footprint.sh)
// Prints: flink_heap_bytes_per_entry <float> keys=<N> flink=<version> java=<version>

import java.lang.management.ManagementFactory;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.state.KeyedStateBackend;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

public class HeapFootprint {

    // The operator runs in this JVM (MiniCluster; no user jars, so the same class): it hands
    // its figures back through this map.
    static final Map<String, Object> OUT = new ConcurrentHashMap<>();

    /** Fills a ValueState<Long> for keys 0..n-1 and measures the used heap around it. */
    public static class Fill extends AbstractStreamOperator<String>
            implements OneInputStreamOperator<Long, String> {
        private final int n;

        Fill(int n) {
            this.n = n;
        }

        @Override
        public void processElement(StreamRecord<Long> ignored) throws Exception {
            KeyedStateBackend<Long> kb = getKeyedStateBackend();
            // register the state first: its fixed cost is not part of the per-entry figure
            ValueState<Long> state = kb.getPartitionedState(VoidNamespace.INSTANCE,
                    VoidNamespaceSerializer.INSTANCE, new ValueStateDescriptor<>("v", Types.LONG));
            long before = stableUsedHeap();
            for (long k = 0; k < n; k++) {
                kb.setCurrentKey(Long.valueOf(k)); // the backend keeps this key object
                state.update(Long.valueOf(k + 1_000_000L)); // a real boxed value, not cached
            }
            long after = stableUsedHeap();
            kb.setCurrentKey(0L);
            if (state.value() != 1_000_000L) {
                throw new IllegalStateException("state lost: key 0 -> " + state.value());
            }
            OUT.put("backend", kb.getClass().getName());
            OUT.put("before", before);
            OUT.put("after", after);
        }
    }

    /**
     * Used heap after full GCs, repeated (at most 10) until two readings agree within 64 KiB.
     * With G1, System.gc() is a full stop-the-world collection (no ExplicitGCInvokesConcurrent),
     * so the used heap right after it is the live data: that is the figure we want.
     */
    static long stableUsedHeap() throws InterruptedException {
        long prev = Long.MIN_VALUE;
        long used = 0;
        for (int i = 0; i < 10; i++) {
            System.gc();
            Thread.sleep(100);
            used = ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
            if (Math.abs(used - prev) < 64 * 1024) {
                break;
            }
            prev = used;
        }
        return used;
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 1_000_000;
        if (n < 1) {
            System.err.println("error: N must be at least 1");
            System.exit(2);
        }
        long timeoutSecs = Long.getLong("footprint.timeout", 900);

        Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none"); // a failure fails the job
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1, conf);
        env.setMaxParallelism(128);
        // one record (bounded source: the job finishes after it) keyed by itself -> Fill
        env.fromSequence(0, 0)
                .keyBy(v -> v, Types.LONG)
                .transform("heap-footprint", Types.STRING, new Fill(n));

        try {
            JobClient job = env.executeAsync("heap-footprint");
            job.getJobExecutionResult().get(timeoutSecs, TimeUnit.SECONDS);
        } catch (Throwable t) {
            System.err.println("error: the Flink job failed or timed out (" + timeoutSecs + " s): " + t);
            t.printStackTrace();
            System.exit(1);
        }
        if (!OUT.containsKey("after")) {
            System.err.println("error: the job finished without a measurement");
            System.exit(1);
        }
        long before = (Long) OUT.get("before");
        long after = (Long) OUT.get("after");
        System.out.println("# backend " + OUT.get("backend") + ", G1 used heap after full GC, max heap "
                + (Runtime.getRuntime().maxMemory() >> 20) + " MiB");
        System.out.println("# before " + before + " bytes, after " + after + " bytes, delta "
                + (after - before) + " bytes");
        System.out.printf("flink_heap_bytes_per_entry %.2f keys=%d flink=%s java=%s%n",
                (after - before) / (double) n, n, EnvironmentInformation.getVersion(),
                System.getProperty("java.version"));
        System.exit(0); // do not wait for lingering non-daemon threads
    }
}
