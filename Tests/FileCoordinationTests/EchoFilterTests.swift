import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

@testable import FileCoordination

/// How a process tells the inotify echo of its own coordinated writes from other processes'
/// changes: events are read late on a busy machine, after later changes happened.
@Suite("The echo of a coordinated write is recognised however late its event is read")
struct EchoFilterTests {
    let directory = TemporaryDirectory("echo")

    @Test("A coordinated deletion's removal event is its echo even after the item came back")
    func removalReadAfterTheItemCameBack() throws {
        let path = directory("deleted.txt").path
        EchoFilter.shared.begin([path], coversContents: [false])
        EchoFilter.shared.end([path], identities: [nil])
        // Someone puts the item back before this process reads the deletion's event.
        try Data("back".utf8).write(to: URL(fileURLWithPath: path))
        #expect(EchoFilter.shared.isEcho(path, aboutRemoval: true))
        // The item's arrival is not this process's doing.
        #expect(!EchoFilter.shared.isEcho(path, aboutContent: true))
        // And once that arrival was seen, a later removal is someone else's too.
        #expect(!EchoFilter.shared.isEcho(path, aboutRemoval: true))
    }

    @Test("A removal after a coordinated write that left the item there is someone else's")
    func removalOfAWrittenItem() throws {
        let url = directory("written.txt")
        try Data("ours".utf8).write(to: url)
        EchoFilter.shared.begin([url.path], coversContents: [false])
        EchoFilter.shared.end([url.path], identities: [try FileSystem.identity(at: url.path)])
        try FileManager.default.removeItem(at: url)
        #expect(!EchoFilter.shared.isEcho(url.path, aboutRemoval: true))
    }
}
