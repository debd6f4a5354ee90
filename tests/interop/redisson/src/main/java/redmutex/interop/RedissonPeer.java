package redmutex.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * A Redisson client driven line by line over stdin, so a test in another
 * language can make a real Java service take and release locks:
 *
 *   lock NAME            lock() (blocking, watchdog lease)          -> OK
 *   trylock NAME MS      tryLock(MS ms)                             -> OK|BUSY <elapsed ms>
 *   unlock NAME          unlock()                                   -> OK | ERR <message>
 *   state NAME           isLocked, held by this thread, hold count, remaining TTL
 *   fence NAME           RFencedLock.lockAndGetToken()              -> TOKEN <n>
 *   funlock NAME         RFencedLock.unlock()                       -> OK
 *   quit
 *
 * Every command runs on the main thread, so all locks belong to one Java thread.
 */
public final class RedissonPeer {
    public static void main(String[] args) throws Exception {
        Config config = new Config();
        config.useSingleServer().setAddress(args[0]).setConnectionMinimumIdleSize(1).setConnectionPoolSize(4)
                .setSubscriptionConnectionMinimumIdleSize(1).setSubscriptionConnectionPoolSize(2);
        RedissonClient redisson = Redisson.create(config);
        System.out.println("READY " + redisson.getId());
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            String reply;
            try {
                switch (w[0]) {
                    case "lock": {
                        redisson.getLock(w[1]).lock();
                        reply = "OK";
                        break;
                    }
                    case "trylock": {
                        long start = System.nanoTime();
                        boolean ok = redisson.getLock(w[1]).tryLock(Long.parseLong(w[2]), TimeUnit.MILLISECONDS);
                        reply = (ok ? "OK " : "BUSY ") + (System.nanoTime() - start) / 1_000_000;
                        break;
                    }
                    case "unlock": {
                        redisson.getLock(w[1]).unlock();
                        reply = "OK";
                        break;
                    }
                    case "state": {
                        RLock l = redisson.getLock(w[1]);
                        reply = "LOCKED " + l.isLocked() + " HELD " + l.isHeldByCurrentThread() + " COUNT "
                                + l.getHoldCount() + " TTL " + l.remainTimeToLive();
                        break;
                    }
                    case "fence": {
                        RFencedLock l = redisson.getFencedLock(w[1]);
                        reply = "TOKEN " + l.lockAndGetToken();
                        break;
                    }
                    case "funlock": {
                        redisson.getFencedLock(w[1]).unlock();
                        reply = "OK";
                        break;
                    }
                    case "quit": {
                        redisson.shutdown();
                        System.out.println("BYE");
                        return;
                    }
                    default:
                        reply = "ERR unknown command " + w[0];
                }
            } catch (Exception e) {
                reply = "ERR " + e.getClass().getSimpleName() + ": " + e.getMessage();
            }
            System.out.println(reply);
            System.out.flush();
        }
        redisson.shutdown();
    }
}
