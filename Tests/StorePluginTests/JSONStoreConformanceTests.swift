import JSONStore
import Persistence
import StoreConformance
import Testing

@Suite("JSON store conformance")
struct JSONStoreConformanceTests {
    @Test("JSON store passes the store-plugin contract", arguments: StoreConformance.checkNames)
    func conformance(_ check: String) throws {
        try StoreConformance(storeType: JSONStore.self).run(check)
    }
}
