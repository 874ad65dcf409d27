import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Framed messages between processes: a deadline bounds the wait for a message, never a message
/// in the middle (a coordination that waits for a presenter's answer in slices once lost the
/// framing of its connection when a slice ended between the length and the bytes).
@Suite("Local sockets keep their framing")
struct LocalSocketTests {
    let directory = TemporaryDirectory("socket")

    /// A connected pair: (the connecting end, the accepted end).
    private func pair() throws -> (Int32, Int32) {
        let path = directory("s").path
        let listener = try LocalSocket.listen(at: path)
        defer { LocalSocket.close(listener) }
        let client = try #require(try LocalSocket.connect(to: path, until: Deadline.after(.seconds(5))))
        return (client, try LocalSocket.accept(listener))
    }

    /// Writes `bytes` as they are, unframed.
    private func raw(_ fd: Int32, _ bytes: [UInt8]) {
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
        #expect(written == bytes.count)
    }

    @Test("A message whose length arrives before a deadline and whose bytes arrive after it is read whole")
    func deadlineInTheMiddleOfAFrame() throws {
        let (client, server) = try pair()
        defer {
            LocalSocket.close(client)
            LocalSocket.close(server)
        }
        raw(client, [0, 0, 0, 5])
        let sent = Signal()
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: 0.3)
            raw(client, Array("hello".utf8))
            sent.fire()
        }
        // The deadline passes while the bytes are on their way: the message is still read.
        let message = try LocalSocket.receive(server, until: Deadline.after(.milliseconds(20)))
        #expect(String(decoding: message, as: UTF8.self) == "hello")
        #expect(sent.wait(timeout: .seconds(10)))
        // The next message is framed as it was sent.
        try LocalSocket.send(client, Array("{}".utf8))
        #expect(try LocalSocket.receive(server, until: Deadline.after(.seconds(10))) == Array("{}".utf8))
    }

    @Test("Waiting in short slices (as coordinations wait for presenters) reads every message intact")
    func slicedWaits() throws {
        let (client, server) = try pair()
        defer {
            LocalSocket.close(client)
            LocalSocket.close(server)
        }
        let messages = (0..<20).map {
            Array("message \($0) ".utf8) + Array(repeating: UInt8(ascii: "x"), count: $0 * 37)
        }
        Thread.detachNewThread {
            for message in messages {
                // Each frame in two writes, with a pause between: a slice may end in the middle.
                let length = UInt32(message.count)
                raw(
                    client,
                    [
                        UInt8(length >> 24), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff),
                        UInt8(length & 0xff),
                    ]
                )
                Thread.sleep(forTimeInterval: 0.004)
                raw(client, message)
            }
        }
        var received: [[UInt8]] = []
        let deadline = Deadline.after(.seconds(30))!
        while received.count < messages.count, !deadline.hasPassed {
            switch Result(catching: { () throws(LocalSocket.ReceiveFailure) in
                try LocalSocket.receive(server, until: Deadline.after(.milliseconds(1)))
            }) {
            case .success(let message): received.append(message)
            case .failure(.timedOut): continue
            case .failure(let failure): throw failure
            }
        }
        #expect(received == messages)
    }

    /// How a receive on `fd` within `timeout` ended: the failure's case name, or "a message".
    private func outcome(_ fd: Int32, within timeout: Duration) -> String {
        do {
            _ = try LocalSocket.receive(fd, until: Deadline.after(timeout))
            return "a message"
        } catch {
            switch error {
            case .timedOut: return "timedOut"
            case .closed: return "closed"
            case .system(let cause): return "\(cause)"
            }
        }
    }

    @Test("A receive with nothing sent times out, and a closed peer is reported as closed")
    func timeoutAndClose() throws {
        let (client, server) = try pair()
        defer { LocalSocket.close(server) }
        #expect(outcome(server, within: .milliseconds(20)) == "timedOut")
        LocalSocket.close(client)
        #expect(outcome(server, within: .seconds(10)) == "closed")
    }
}
