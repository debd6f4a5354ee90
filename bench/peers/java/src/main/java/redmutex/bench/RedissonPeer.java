package redmutex.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.RedissonRedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * The Redisson side of the peer benchmarks, behind the line protocol of
 * bench/peers (driver.py documents it). Libraries:
 *
 *   redisson       RLock: lock() (watchdog lease) / unlock(), Redisson's defaults;
 *                  with several URLs, RedissonRedLock over one client per server
 *
 * Every command runs on the main thread, so every lock belongs to one Java thread.
 */
public final class RedissonPeer {
    private static final Map<String, RedissonClient> clients = new HashMap<>();
    private static final Map<String, RLock> locks = new HashMap<>();
    private static final Map<String, List<RLock>> held = new HashMap<>();
    private static long holdCpu0;

    private static long cpuNs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    private static RedissonClient client(String url) {
        return clients.computeIfAbsent(url, u -> {
            Config config = new Config();
            config.useSingleServer().setAddress(u);
            return Redisson.create(config);
        });
    }

    private static RLock lock(String name, List<String> urls) {
        String key = name + " " + String.join(" ", urls);
        return locks.computeIfAbsent(key, k -> {
            if (urls.size() == 1)
                return client(urls.get(0)).getLock(name);
            RLock[] each = new RLock[urls.size()];
            for (int i = 0; i < each.length; i++)
                each[i] = client(urls.get(i)).getLock(name);
            return new RedissonRedLock(each);
        });
    }

    private static String pairs(RLock l, double seconds) {
        long n = 0, t0 = System.nanoTime(), c0 = cpuNs(), end = t0 + (long) (seconds * 1e9), t;
        do {
            for (int i = 0; i < 10; i++) {
                l.lock();
                l.unlock();
            }
            n += 10;
            t = System.nanoTime();
        } while (t < end);
        return "ok " + n + " " + (t - t0) + " " + (cpuNs() - c0);
    }

    private static void sleepUntil(long t) throws InterruptedException {
        long d;
        while ((d = t - System.nanoTime()) > 0)
            TimeUnit.NANOSECONDS.sleep(d);
    }

    private static String contend(RLock l, long start, long end, long holdUs) throws InterruptedException {
        StringBuilder out = new StringBuilder();
        sleepUntil(start);
        int n = 0;
        while (System.nanoTime() < end) {
            l.lock();
            long got = System.nanoTime();
            sleepUntil(got + holdUs * 1000);
            long rel = System.nanoTime();
            l.unlock();
            out.append(' ').append(got).append(' ').append(rel).append(' ').append(System.nanoTime());
            n++;
        }
        return "ok 0" + out;
    }

    private static String hold(String name, int count, String url) {
        List<RLock> list = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            RLock l = client(url).getLock(name + ":" + i);
            l.lock();
            list.add(l);
        }
        held.put(name, list);
        holdCpu0 = cpuNs();
        return "held";
    }

    private static String unhold(String name) {
        long cpu = cpuNs() - holdCpu0;
        int lost = 0;
        for (RLock l : held.remove(name)) {
            try {
                l.unlock();
            } catch (RuntimeException e) {
                lost++;
            }
        }
        return "ok " + cpu + " " + lost;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("quit"))
                break;
            List<String> urls = new ArrayList<>(), rest = new ArrayList<>();
            for (int i = 3; i < w.length; i++)
                (w[i].startsWith("redis://") ? urls : rest).add(w[i]);
            String name = w[2], reply;
            switch (w[0]) {
                case "pairs":
                    reply = pairs(lock(name, urls), Double.parseDouble(rest.get(0)));
                    break;
                case "contend":
                    reply = contend(lock(name, urls), Long.parseLong(rest.get(0)), Long.parseLong(rest.get(1)),
                            Long.parseLong(rest.get(2)));
                    break;
                case "acquire": {
                    RLock l = lock(name, urls);
                    System.out.println("started " + System.nanoTime());
                    System.out.flush();
                    l.lock();
                    reply = "ok " + System.nanoTime();
                    break;
                }
                case "release": {
                    RLock l = lock(name, urls);
                    long t0 = System.nanoTime();
                    l.unlock();
                    reply = "ok " + t0 + " " + System.nanoTime();
                    break;
                }
                case "hold":
                    reply = hold(name, Integer.parseInt(rest.get(0)), urls.get(0));
                    break;
                case "unhold":
                    reply = unhold(name);
                    break;
                default:
                    throw new IllegalArgumentException("unknown command " + w[0]);
            }
            System.out.println(reply);
            System.out.flush();
        }
        for (RedissonClient c : clients.values())
            c.shutdown();
    }
}
