package dev.memevo.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * A real memevo sidecar for the tests, run as the Go and TypeScript tests run it: {@code python -m
 * memevo.sidecar.cli serve} (the interpreter: see {@link #python}) with {@code --embedder none
 * --dimension 8}, on a unix socket and a loopback TCP port, ready once its ready file names them;
 * stopped with SIGTERM.
 */
final class Sidecar implements AutoCloseable {
  static final int DIMENSION = 8;
  private static final long READY_TIMEOUT_MS = 60_000;
  private static final long STOP_TIMEOUT_S = 15;
  private static final Pattern ADDRESS = Pattern.compile("\"([^\"]+)\"");
  private static String interpreter;

  final String unix;
  final String tcp;
  private final Process process;
  private final Path runDir;
  private final boolean ownsRunDir;

  private Sidecar(Process process, Path runDir, boolean ownsRunDir, String unix, String tcp) {
    this.process = process;
    this.runDir = runDir;
    this.ownsRunDir = ownsRunDir;
    this.unix = unix;
    this.tcp = tcp;
  }

  /**
   * The interpreter that runs the sidecar: $MEMEVO_PYTHON, else the first of {@code python3} and {@code
   * python} on PATH that imports memevo. Many systems have no {@code python}, and the first one on PATH
   * is not always the one memevo was installed into.
   */
  static synchronized String python() throws IOException, InterruptedException {
    if (interpreter != null) {
      return interpreter;
    }
    String chosen = System.getenv("MEMEVO_PYTHON");
    if (chosen != null && !chosen.isEmpty()) {
      return interpreter = chosen;
    }
    for (String candidate : List.of("python3", "python")) {
      try {
        Process probe = new ProcessBuilder(candidate, "-c", "import memevo.sidecar.cli")
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .start();
        if (probe.waitFor() == 0) {
          return interpreter = candidate;
        }
      } catch (IOException notOnPath) {
        // the next candidate
      }
    }
    throw new IllegalStateException("the tests run a memevo sidecar, but neither python3 nor python on PATH "
        + "imports memevo: install it (pip install -e . in the checkout, or a built wheel) or set "
        + "MEMEVO_PYTHON to the interpreter that has it");
  }

  /** A sidecar on a new temporary directory, deleted by {@link #close}. */
  static Sidecar start(String... extra) throws IOException, InterruptedException {
    return start(Files.createTempDirectory("memevo-java-"), true, extra);
  }

  /**
   * A sidecar whose data directory and socket are in {@code runDir} (kept by {@link #close}), so a
   * second one started there serves the same data on the same address.
   */
  static Sidecar startIn(Path runDir, String... extra) throws IOException, InterruptedException {
    return start(runDir, false, extra);
  }

  private static Sidecar start(Path runDir, boolean ownsRunDir, String... extra) throws IOException, InterruptedException {
    String python = python();
    Path ready = runDir.resolve("ready.json");
    Files.deleteIfExists(ready);
    List<String> command = new ArrayList<>(List.of(python, "-m", "memevo.sidecar.cli", "serve",
        "--data", runDir.resolve("data").toString(),
        "--listen", "unix://" + runDir.resolve("memevo.sock"),
        "--listen", "127.0.0.1:0",
        "--embedder", "none",
        "--dimension", String.valueOf(DIMENSION),
        "--ready-file", ready.toString()));
    command.addAll(List.of(extra));
    Path log = runDir.resolve("sidecar.log");
    Process process = new ProcessBuilder(command)
        .redirectOutput(ProcessBuilder.Redirect.DISCARD)
        .redirectError(ProcessBuilder.Redirect.appendTo(log.toFile()))
        .start();
    Runtime.getRuntime().addShutdownHook(new Thread(process::destroy)); // no sidecar outlives a killed test run
    long deadline = System.currentTimeMillis() + READY_TIMEOUT_MS;
    while (true) {
      if (!process.isAlive()) {
        throw new IllegalStateException("the sidecar exited with " + process.exitValue() + " before it was ready:\n" + read(log));
      }
      if (System.currentTimeMillis() > deadline) {
        process.destroyForcibly().waitFor();
        throw new IllegalStateException("the sidecar was not ready after " + READY_TIMEOUT_MS + " ms:\n" + read(log));
      }
      Thread.sleep(50);
      String file;
      try {
        file = Files.readString(ready, StandardCharsets.UTF_8);
      } catch (IOException notYet) {
        continue;
      }
      int listen = file.indexOf("\"listen\"");
      int open = file.indexOf('[', Math.max(listen, 0));
      int end = file.indexOf(']', Math.max(open, 0));
      if (listen < 0 || open < 0 || end < 0) {
        continue;
      }
      String unix = null;
      String tcp = null;
      Matcher m = ADDRESS.matcher(file.substring(open + 1, end));
      while (m.find()) {
        String address = m.group(1);
        if (address.startsWith("unix:")) {
          unix = address;
        } else {
          tcp = address;
        }
      }
      if (unix != null && tcp != null) {
        return new Sidecar(process, runDir, ownsRunDir, unix, tcp);
      }
    }
  }

  /** SIGTERM, then the exit code (SIGKILL after 15 s, which fails). */
  int stop() throws InterruptedException {
    process.destroy();
    if (!process.waitFor(STOP_TIMEOUT_S, TimeUnit.SECONDS)) {
      process.destroyForcibly().waitFor();
      throw new IllegalStateException("the sidecar did not stop within " + STOP_TIMEOUT_S + " s of SIGTERM");
    }
    return process.exitValue();
  }

  /** SIGKILL, as in a crash: nothing is flushed. */
  void kill() throws InterruptedException {
    process.destroyForcibly().waitFor();
  }

  /** The sidecar's stderr so far, to explain a failure. */
  String log() {
    return read(runDir.resolve("sidecar.log"));
  }

  @Override
  public void close() throws InterruptedException, IOException {
    try {
      if (process.isAlive()) {
        stop();
      }
    } finally {
      if (ownsRunDir) {
        delete(runDir);
      }
    }
  }

  static void delete(Path dir) throws IOException {
    try (Stream<Path> paths = Files.walk(dir)) {
      for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }

  private static String read(Path log) {
    try {
      return Files.readString(log, StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "(no log: " + e + ")";
    }
  }
}
